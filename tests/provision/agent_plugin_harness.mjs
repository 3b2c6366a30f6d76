// Loads sand's OpenCode plugin or Pi extension (an ES module) the way the agent does
// and drives it with the agent's own events, read as JSON from stdin:
//
//   node agent_plugin_harness.mjs opencode MODULE   {"directory", "events": [event...]}
//   node agent_plugin_harness.mjs pi MODULE         {"cwd", "session", "events": [[name, event]...]}
//
// OpenCode: every exported plugin function is called with its context, and the
// returned `event` hook with `{ event }` for each event, in order. Pi: the default
// export is called with a stand-in `pi` whose `on(name, handler)` records handlers,
// and each named event's handlers are invoked with `(event, ctx)`.
//
// The plugins spawn the writer and do not wait for it (an agent must never wait on
// sand); so that the events land in order, the harness waits for every child
// spawned by one event to exit before sending the next. It watches child_process
// .spawn -- the real one still runs -- and prints the argv of each child it saw, one
// JSON line each, so the test can tell "no write" from "a write that did nothing".
// Any error (a module that does not load, an event name no handler listens to)
// exits non-zero.
import childProcess from "node:child_process";
import { syncBuiltinESMExports } from "node:module";
import { readFileSync } from "node:fs";
import { pathToFileURL } from "node:url";

const [kind, modulePath] = process.argv.slice(2);
const input = JSON.parse(readFileSync(0, "utf8"));

const spawned = [];
let pending = [];
const realSpawn = childProcess.spawn;
childProcess.spawn = function (command, args, options) {
  const child = realSpawn.call(this, command, args, options);
  spawned.push([command, ...(args || [])]);
  pending.push(new Promise((resolve) => child.on("close", resolve).on("error", resolve)));
  return child;
};
syncBuiltinESMExports(); // `import { spawn } from "node:child_process"` sees the watcher

async function settle() {
  const waiting = pending;
  pending = [];
  await Promise.all(waiting);
}

const plugin = await import(pathToFileURL(modulePath).href);

if (kind === "opencode") {
  const hooks = [];
  const context = { directory: input.directory, worktree: input.directory, project: {} };
  for (const exported of Object.values(plugin)) {
    if (typeof exported === "function") hooks.push(await exported(context));
  }
  if (!hooks.some((h) => typeof h?.event === "function")) throw new Error("no event hook");
  for (const event of input.events) {
    for (const h of hooks) if (h.event) await h.event({ event });
    await settle();
  }
} else if (kind === "pi") {
  const handlers = new Map();
  const pi = {
    on(name, handler) {
      handlers.set(name, [...(handlers.get(name) || []), handler]);
    },
  };
  await plugin.default(pi);
  const ctx = {
    cwd: input.cwd,
    sessionManager: {
      getSessionId: () => input.session,
      getSessionFile: () => `/home/u/.pi/agent/sessions/${input.session}.jsonl`,
    },
  };
  for (const [name, event] of input.events) {
    const listening = handlers.get(name);
    if (!listening) throw new Error(`the extension does not listen to ${name}`);
    for (const handler of listening) await handler({ type: name, ...event }, ctx);
    await settle();
  }
} else {
  throw new Error(`unknown agent ${kind}`);
}
for (const argv of spawned) console.log(JSON.stringify(argv));
