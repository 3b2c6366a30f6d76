// Managed by sand: tells sand's agent-state hook what each OpenCode session is
// doing, from OpenCode's own plugin events. It never blocks or fails a session.
import { spawn } from "node:child_process";

const WRITER = "/usr/local/lib/sand/bundle/agent-state";
const STATE = {
  "session.status": (p) => (p.status && p.status.type === "idle" ? null : "working"),
  "session.idle": () => "done",
  "session.error": () => "failed",
  "permission.updated": () => "needs-input",
  "permission.asked": () => "needs-input",
};

export const SandAgentState = async ({ directory }) => ({
  event: async ({ event }) => {
    const decide = STATE[event.type];
    const p = event.properties || {};
    const state = decide ? decide(p) : null;
    if (!state || !p.sessionID) return;
    try {
      const child = spawn("python3", ["-I", WRITER, "opencode"], {
        stdio: ["pipe", "ignore", "ignore"],
      });
      child.on("error", () => {});
      child.stdin.on("error", () => {});
      child.stdin.end(JSON.stringify({ session: p.sessionID, state, cwd: directory }));
    } catch {}
  },
});
