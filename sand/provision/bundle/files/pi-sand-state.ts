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
  pi.on("agent_end", async (_event: any, ctx: any) => tell("done", ctx));
  pi.on("session_shutdown", async (_event: any, ctx: any) => tell("done", ctx));
}
