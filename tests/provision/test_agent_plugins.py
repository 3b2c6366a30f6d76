"""sand's OpenCode plugin and Pi extension, run for real: each is loaded under node as
its agent loads it (OpenCode: the ES module's plugin function called with its context,
then its `event` hook; Pi: the TypeScript compiled by esbuild, its default export
handed a `pi` whose `on` records handlers) by tests/provision/agent_plugin_harness.mjs,
fed the events the agent documents, and the state file the REAL writer (the bundle's
agent-state, spawned by the plugin) leaves in $HOME is what is checked.

The only change to the shipped module is the writer's path: the guest's
/usr/local/lib/sand/bundle/agent-state becomes this tree's copy of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sand.provision.bundle import BUNDLE_DIR, GUEST_DIR
from tests.required import require

HARNESS = Path(__file__).with_name("agent_plugin_harness.mjs")
FILES = BUNDLE_DIR / "files"
WRITER_LINE = f'const WRITER = "{GUEST_DIR}/agent-state";'
CWD = "/home/u/src/app"


def tool(name: str) -> str:
    path = shutil.which(name)
    require(path is not None, f"{name} not installed (scripts/bootstrap installs it)")
    assert path is not None
    return path


def installable(source: str, tmp_path: Path, name: str) -> Path:
    """The module as shipped, its writer pointed at this tree's agent-state."""
    assert source.count(WRITER_LINE) == 1, "the plugin no longer names the guest's writer"
    path = tmp_path / name
    path.write_text(source.replace(WRITER_LINE, WRITER_LINE.replace(
        f"{GUEST_DIR}/agent-state", str(BUNDLE_DIR / "agent-state"))))  # fmt: skip
    return path


class Agent:
    """One agent's plugin loaded by the harness, with its own $HOME for the writer."""

    def __init__(self, kind: str, module: Path, home: Path) -> None:
        self.kind, self.module, self.home = kind, module, home
        self.node = tool("node")

    @classmethod
    def opencode(cls, tmp_path: Path, source: str | None = None) -> Agent:
        text = source or (FILES / "opencode-sand-state.js").read_text()
        # .mjs: OpenCode (Bun) loads the .js as an ES module; node needs to be told.
        return cls("opencode", installable(text, tmp_path, "sand-state.mjs"), tmp_path / "home")

    @classmethod
    def pi(cls, tmp_path: Path, source: str | None = None) -> Agent:
        text = source or (FILES / "pi-sand-state.ts").read_text()
        ts = installable(text, tmp_path, "sand-state.ts")
        out = tmp_path / "sand-state.mjs"
        proc = subprocess.run(
            [tool("esbuild"), str(ts), "--format=esm", "--platform=node", f"--outfile={out}"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        return cls("pi", out, tmp_path / "home")

    def send(self, payload: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        self.home.mkdir(exist_ok=True)
        return subprocess.run(
            [self.node, str(HARNESS), self.kind, str(self.module)],
            input=json.dumps(payload), capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "HOME": str(self.home)},
        )  # fmt: skip

    def drive(self, payload: dict[str, Any]) -> list[list[str]]:
        """Send the events; the argv of every writer the plugin spawned."""
        proc = self.send(payload)
        assert proc.returncode == 0, proc.stderr
        return [json.loads(line) for line in proc.stdout.splitlines()]

    def states(self) -> dict[str, tuple[str, str]]:
        """session -> (state, cwd), as the writer left its file."""
        path = self.home / ".local/state/sand/agents.json"
        if not path.exists():
            return {}
        doc = json.loads(path.read_text())
        assert all(s["agent"] == self.kind for s in doc["sessions"])
        return {s["session"]: (s["state"], s.get("cwd", "")) for s in doc["sessions"]}


def oc(events: list[dict[str, Any]]) -> dict[str, Any]:
    return {"directory": CWD, "events": events}


def status(session: str, kind: str) -> dict[str, Any]:
    status: dict[str, Any] = {"type": kind}
    if kind == "retry":
        status.update(attempt=1, message="rate limited", next=1_700_000_000)
    return {"type": "session.status", "properties": {"sessionID": session, "status": status}}


def permission(session: str) -> dict[str, Any]:
    return {"type": "permission.asked", "properties": {
        "id": "per_1", "sessionID": session, "permission": "bash",
        "patterns": ["npm install"], "metadata": {"command": "npm install"}, "always": [],
    }}  # fmt: skip


def test_opencode_events_reach_the_writers_file(tmp_path: Path) -> None:
    agent = Agent.opencode(tmp_path)
    spawned = agent.drive(oc([status("ses_a", "busy")]))
    assert spawned == [["python3", "-I", str(BUNDLE_DIR / "agent-state"), "opencode"]]
    assert agent.states() == {"ses_a": ("working", CWD)}

    agent.drive(oc([permission("ses_a")]))
    assert agent.states()["ses_a"][0] == "needs-input"
    # OpenCode 1.x before permission.asked: permission.updated, the Permission itself.
    agent.drive(oc([status("ses_a", "retry")]))
    assert agent.states()["ses_a"][0] == "working"
    agent.drive(oc([{"type": "permission.updated", "properties": {
        "id": "per_2", "type": "bash", "sessionID": "ses_a", "messageID": "msg_1",
        "title": "npm install", "metadata": {}, "time": {"created": 1},
    }}]))  # fmt: skip
    assert agent.states()["ses_a"][0] == "needs-input"

    # A turn ends: session.status idle (nothing: session.idle follows it), then session.idle.
    assert agent.drive(oc([status("ses_a", "idle")])) == []
    assert agent.states()["ses_a"][0] == "needs-input"
    agent.drive(oc([status("ses_a", "busy"), status("ses_a", "idle"),
                    {"type": "session.idle", "properties": {"sessionID": "ses_a"}}]))  # fmt: skip
    assert agent.states()["ses_a"][0] == "done"

    error = {"name": "ProviderAuthError", "data": {"providerID": "x", "message": "bad key"}}
    agent.drive(oc([status("ses_b", "busy"),
                    {"type": "session.error", "properties": {"sessionID": "ses_b", "error": error}},
                    # an error of no session, and events sand does not follow: no write
                    {"type": "session.error", "properties": {"error": error}},
                    {"type": "message.updated", "properties": {"info": {"sessionID": "ses_b"}}},
                    ]))  # fmt: skip
    assert agent.states() == {"ses_a": ("done", CWD), "ses_b": ("failed", CWD)}


def pi_run(session: str, events: list[list[Any]]) -> dict[str, Any]:
    return {"cwd": CWD, "session": session, "events": events}


def assistant(stop: str, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "api":
            "anthropic-messages", "provider": "anthropic", "model": "claude-x", "usage": {},
            "stopReason": stop, "timestamp": 2, **extra}  # fmt: skip


USER = {"role": "user", "content": "fix it", "timestamp": 1}
TOOL = {"role": "toolResult", "toolCallId": "t1", "toolName": "bash", "content": [],
        "isError": False, "timestamp": 3}  # fmt: skip


def test_pi_events_reach_the_writers_file_and_a_failed_run_is_failed(tmp_path: Path) -> None:
    agent = Agent.pi(tmp_path)
    spawned = agent.drive(pi_run("p-1", [["session_start", {"reason": "startup"}]]))
    assert spawned == [["python3", "-I", str(BUNDLE_DIR / "agent-state"), "pi"]]
    assert agent.states() == {"p-1": ("idle", CWD)}
    agent.drive(pi_run("p-1", [["agent_start", {}]]))
    assert agent.states()["p-1"][0] == "working"
    ok = [USER, assistant("toolUse"), TOOL, assistant("stop")]
    agent.drive(pi_run("p-1", [["agent_end", {"messages": ok}]]))
    assert agent.states()["p-1"][0] == "done"

    # A run the provider failed: the last assistant message stopped by "error" (a tool
    # result after it changes nothing); Pi's own retry makes it working again.
    failed = [USER, assistant("error", errorMessage="429 rate limited", content=[]), TOOL]
    agent.drive(pi_run("p-1", [["agent_start", {}], ["agent_end", {"messages": failed}]]))
    assert agent.states()["p-1"][0] == "failed"
    agent.drive(pi_run("p-1", [["agent_start", {}]]))
    assert agent.states()["p-1"][0] == "working"
    agent.drive(pi_run("p-1", [["agent_end", {"messages": failed}]]))

    # Quitting after a failure keeps it failed; after an answer (or an abort), done.
    agent.drive(pi_run("p-1", [["session_shutdown", {"reason": "quit"}]]))
    aborted = [USER, assistant("aborted")]
    agent.drive(pi_run("p-2", [["agent_start", {}], ["agent_end", {"messages": aborted}],
                               ["session_shutdown", {"reason": "quit"}]]))  # fmt: skip
    agent.drive(pi_run("p-3", [["session_start", {"reason": "new"}],
                               ["session_shutdown", {"reason": "quit"}]]))  # fmt: skip
    assert agent.states() == {"p-1": ("failed", CWD), "p-2": ("done", CWD), "p-3": ("done", CWD)}


@pytest.mark.parametrize(
    ("kind", "name", "breakage"),
    [
        ("opencode", "opencode-sand-state.js", ("export const", "export cnst")),
        ("opencode", "opencode-sand-state.js", ('"session.idle"', '"session.idled"')),
        ("pi", "pi-sand-state.ts", ('"agent_start"', '"agent_begin"')),
        ("pi", "pi-sand-state.ts", ('"-I", WRITER', '"-I", WRITER + "x"')),
    ],
)
def test_a_broken_plugin_is_caught(
    tmp_path: Path, kind: str, name: str, breakage: tuple[str, str]
) -> None:
    """The harness is what the two tests above stand on: a plugin that does not load, an
    event renamed, or a writer not found shows as a failure, not as a quiet pass."""
    source = (FILES / name).read_text()
    assert breakage[0] in source
    broken = source.replace(breakage[0], breakage[1], 1)
    if kind == "pi":
        agent = Agent.pi(tmp_path, broken)
        payload = pi_run("p-1", [["session_start", {}], ["agent_start", {}]])
        expected: dict[str, tuple[str, str]] = {"p-1": ("working", CWD)}
    else:
        agent = Agent.opencode(tmp_path, broken)
        payload = oc([status("ses_a", "busy"), {"type": "session.idle",
                                                "properties": {"sessionID": "ses_a"}}])  # fmt: skip
        expected = {"ses_a": ("done", CWD)}
    proc = agent.send(payload)
    assert proc.returncode != 0 or agent.states() != expected
