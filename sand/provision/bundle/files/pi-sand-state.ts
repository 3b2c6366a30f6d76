// Managed by sand: tells sand's agent-state hook what this Pi session is doing,
// from Pi's extension events. It never blocks or fails a session.
import { spawn } from "node:child_process";

const WRITER = "/usr/local/lib/sand/bundle/agent-state";

export default function (pi: any) {
  const tell = (state: string, ctx: any) => {
    const manager = ctx?.sessionManager;
    const session =
      manager?.getSessionId?.() ?? manager?.getSessionFile?.() ?? `pid-${process.pid}`;
    try {
      const child = spawn("python3", ["-I", WRITER, "pi"], { stdio: ["pipe", "ignore", "ignore"] });
      child.on("error", () => {});
      child.stdin.on("error", () => {});
      child.stdin.end(JSON.stringify({ session: String(session), state, cwd: ctx?.cwd ?? process.cwd() }));
    } catch {}
  };
  pi.on("session_start", async (_event: any, ctx: any) => tell("idle", ctx));
  pi.on("agent_start", async (_event: any, ctx: any) => tell("working", ctx));
  // Pi has no failure event: a run the provider failed (rate limit, authentication,
  // server error) ends with agent_end too, its last assistant message stopped by "error".
  // Pi may retry it on its own; the retry's agent_start makes the session working again.
  pi.on("agent_end", async (event: any, ctx: any) => {
    const messages: any[] = Array.isArray(event?.messages) ? event.messages : [];
    const last = messages.filter((m) => m?.role === "assistant").pop();
    tell(last?.stopReason === "error" ? "failed" : "done", ctx);
  });
  // The session ends: done, unless its last run failed (the writer keeps "failed").
  pi.on("session_shutdown", async (_event: any, ctx: any) => tell("ended", ctx));
}
