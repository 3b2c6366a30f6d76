"""Agent state from real guests: netns sshd guests provisioned by a real `sand apply`
(stand-in agents), whose installed hooks are invoked the way each agent invokes them --
Claude Code's hook command from ~/.claude/settings.json with its JSON on stdin, Codex's
`notify` argv from ~/.codex/config.toml with its JSON as the last argument, and the
payload sand's OpenCode plugin and Pi extension hand the writer -- then read back
through the guest file and `sand status --deep` (text and JSON).

The guest file is the guest's word: a hostile one (huge, full of escapes, not JSON)
is shown bounded and inert, or not at all, and never breaks the status.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.limactl_standin import StandIn
from tests.machine_schemas import validate
from tests.provision.e2e_helpers import stand_in_agents

pytestmark = pytest.mark.e2e

STATE = ".local/state/sand/agents.json"
HEAD = """\
apiVersion: sand/v1
project: agentse2e
backends:
  laptop: {type: lima, lima_home: ./lima, derive_bases: false}
defaults: {image: debian-12, disk: 20GiB, memory: 2GiB}
vms:
"""
MANIFEST = HEAD + "  - name: dev-1\n    agents: [claude, codex, opencode, pi]\n"


class Fleet:
    """One provisioned guest behind the limactl stand-in, and `sand` against it."""

    def __init__(self, root: Path, guest: Any, manifest: str = MANIFEST) -> None:
        self.root, self.guest = root, guest
        self.standin = StandIn.create(root, lima_home=root / "lima")
        (root / "sand.yaml").write_text(manifest)
        self.standin.back_with_guest("dev-1", guest)
        self.env = {
            **os.environ,
            **self.standin.env(),
            "SAND_STATE_DIR": str(root / "state"),
            "SAND_AGENT_SOURCE": str(stand_in_agents(root / "agents")),
            "NO_COLOR": "1",
        }
        self.env.pop("LIMA_HOME")
        proc = self.sand("apply", "--auto-approve")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        self.home = f"/home/{guest.user}" if guest.user != "root" else "/root"

    def sand(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sand", *args], env=self.env, capture_output=True,
            text=True, timeout=300, cwd=self.root, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def as_user(
        self, command: str, stdin: bytes = b"", cwd: str = "~"
    ) -> subprocess.CompletedProcess[bytes]:
        """``command`` run by the VM's user through /bin/sh (as an agent runs its hook)."""
        line = f"cd {cwd} && {command}"
        return self.guest.run_root(
            ["runuser", "-l", self.guest.user, "-c", line], input=stdin, check=True
        )

    def claude_hook(self, event: str, payload: dict[str, Any]) -> bytes:
        """Every command Claude Code would run for ``event``, as it runs them: through a
        shell, its JSON on stdin; what they printed (Claude would read it)."""
        settings = json.loads(self.root_cat(f"{self.home}/.claude/settings.json"))
        printed = b""
        for group in settings["hooks"][event]:
            for hook in group["hooks"]:
                if "direnv" in hook["command"]:
                    continue  # the direnv hook wants Claude's env file, not a state
                body = {"hook_event_name": event, "transcript_path": "/tmp/t.jsonl", **payload}
                out = self.as_user(hook["command"], json.dumps(body).encode(), "~/work")
                printed += out.stdout
        return printed

    def codex_notify(self, payload: dict[str, Any]) -> None:
        """Codex's `notify` program, with the turn's JSON as its last argument."""
        config = tomllib.loads(self.root_cat(f"{self.home}/.codex/config.toml"))
        argv = [*config["notify"], json.dumps(payload)]
        self.as_user(shlex.join(argv))

    def plugin(self, agent: str, payload: dict[str, Any]) -> None:
        """What sand's OpenCode plugin / Pi extension hands the writer on stdin."""
        self.as_user(
            f"python3 -I /usr/local/lib/sand/bundle/agent-state {agent}",
            json.dumps(payload).encode(),
        )

    def root_cat(self, path: str) -> str:
        return self.guest.run_root(["cat", path], check=True).stdout.decode()

    def guest_file(self) -> list[dict[str, Any]]:
        doc = json.loads(self.root_cat(f"{self.home}/{STATE}"))
        return sorted(doc["sessions"], key=lambda s: (s["agent"], s["session"]))

    def deep(self) -> dict[str, Any]:
        proc = self.sand("status", "--deep", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads(proc.stdout)
        validate("status", doc)  # the agents key as status.schema.json says
        return {r["vm"]: r for r in doc["vms"]}["dev-1"]


def states(sessions: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    return {(s["agent"], s["session"]): s["state"] for s in sessions}


def test_each_agents_hooks_write_the_guest_file_and_status_shows_it(
    tmp_path: Path, netns_guest
) -> None:
    fleet = Fleet(tmp_path, netns_guest())
    fleet.as_user("mkdir -p ~/work")
    # Before any agent ran: read, and nothing to show.
    row = fleet.deep()
    assert row["agents"] == {"sessions": [], "problem": None}
    assert row["conditions"]["Healthy"] is True

    base = {"session_id": "c-1", "cwd": f"{fleet.home}/work", "permission_mode": "default"}
    assert fleet.claude_hook("SessionStart", {**base, "source": "startup"}) == b""
    assert states(fleet.guest_file()) == {("claude", "c-1"): "idle"}
    assert fleet.claude_hook("UserPromptSubmit", {**base, "prompt": "fix the build"}) == b""
    assert states(fleet.guest_file()) == {("claude", "c-1"): "working"}
    fleet.claude_hook(
        "Notification",
        {**base, "message": "Claude needs your permission to use Bash",
         "notification_type": "permission_prompt"},
    )  # fmt: skip
    assert states(fleet.guest_file()) == {("claude", "c-1"): "needs-input"}
    # An idle reminder says nothing new about the session.
    fleet.claude_hook(
        "Notification",
        {**base, "message": "Claude is waiting for your input", "notification_type": "idle_prompt"},
    )
    assert states(fleet.guest_file()) == {("claude", "c-1"): "needs-input"}
    fleet.claude_hook("PostToolUse", {**base, "tool_name": "Bash", "tool_input": {}})
    assert states(fleet.guest_file()) == {("claude", "c-1"): "working"}
    fleet.claude_hook("Stop", {**base, "stop_hook_active": False})
    [record] = fleet.guest_file()
    assert record["state"] == "done" and record["cwd"] == f"{fleet.home}/work"

    fleet.codex_notify(
        {"type": "agent-turn-complete", "thread-id": "x-1", "turn-id": "t-9",
         "cwd": f"{fleet.home}/work", "input-messages": ["hi"], "last-assistant-message": "ok"}
    )  # fmt: skip
    fleet.plugin("opencode", {"session": "ses_1", "state": "failed", "cwd": "/srv"})
    fleet.plugin("pi", {"session": "p-1", "state": "working", "cwd": "/srv"})
    assert states(fleet.guest_file()) == {
        ("claude", "c-1"): "done",
        ("codex", "x-1"): "done",
        ("opencode", "ses_1"): "failed",
        ("pi", "p-1"): "working",
    }
    # The plugin and extension themselves are installed where the agents load them.
    fleet.root_cat(f"{fleet.home}/.config/opencode/plugin/sand-state.js")
    fleet.root_cat(f"{fleet.home}/.pi/agent/extensions/sand-state.ts")

    row = fleet.deep()
    assert states(row["agents"]["sessions"]) == states(fleet.guest_file())
    assert row["agents"]["problem"] is None
    proc = fleet.sand("status", "--deep")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^dev-1: pi p-1: working \d+s in /srv$", proc.stdout, re.M)
    assert re.search(rf"^dev-1: claude c-1: done \d+s in {fleet.home}/work$", proc.stdout, re.M)

    # SessionEnd keeps the record (done), and never breaks on a huge prompt.
    fleet.claude_hook("UserPromptSubmit", {**base, "prompt": "x" * 200_000})
    assert states(fleet.guest_file())[("claude", "c-1")] == "working"

    # A turn an API error ended: Claude Code runs StopFailure (not Stop) -> failed; the
    # session ending after it keeps the failure, while one ending after an answer is done.
    assert fleet.claude_hook(
        "StopFailure",
        {**base, "error": "rate_limit", "error_details": "429 Too Many Requests",
         "last_assistant_message": "API Error: Rate limit reached"},
    ) == b""  # fmt: skip
    assert states(fleet.guest_file())[("claude", "c-1")] == "failed"
    fleet.claude_hook("SessionEnd", {**base, "reason": "prompt_input_exit"})
    assert states(fleet.guest_file())[("claude", "c-1")] == "failed"
    row = fleet.deep()
    assert states(row["agents"]["sessions"])[("claude", "c-1")] == "failed"
    proc = fleet.sand("status", "--deep")
    assert re.search(rf"^dev-1: claude c-1: failed \d+s in {fleet.home}/work$", proc.stdout, re.M)
    done = {**base, "session_id": "c-2"}
    fleet.claude_hook("UserPromptSubmit", {**done, "prompt": "go"})
    fleet.claude_hook("Stop", {**done, "stop_hook_active": False})
    fleet.claude_hook("SessionEnd", {**done, "reason": "other"})
    assert states(fleet.guest_file())[("claude", "c-2")] == "done"


def test_the_writer_holds_under_concurrent_sessions_and_stays_bounded(
    tmp_path: Path, netns_guest
) -> None:
    fleet = Fleet(tmp_path, netns_guest())
    writer = "python3 -I /usr/local/lib/sand/bundle/agent-state"
    # Forty sessions at once, each a Claude hook: the file stays whole JSON, no update
    # is lost to another, and only the newest 32 are kept.
    script = " ".join(
        f'(printf \'%s\' \'{{"hook_event_name":"UserPromptSubmit","session_id":"s{i:02d}",'
        f'"cwd":"/w"}}\' | {writer} claude) &'
        for i in range(40)
    )
    fleet.as_user(f"{script} wait")
    sessions = fleet.guest_file()
    assert len(sessions) == 32
    assert all(s["state"] == "working" for s in sessions)
    size = int(fleet.as_user(f"stat -c %s ~/{STATE}").stdout)
    assert size < 16 * 1024
    # A file the writer cannot read (someone else's, not JSON) is started afresh.
    fleet.as_user(f"printf 'not json' > ~/{STATE}")
    fleet.plugin("pi", {"session": "p-2", "state": "done"})
    assert states(fleet.guest_file()) == {("pi", "p-2"): "done"}
    # Junk on stdin, an unknown agent, an unknown event: nothing written, exit 0, silent.
    for agent, stdin in (("claude", b"\x00\xff{"), ("nobody", b"{}"), ("claude", b"{}")):
        out = fleet.as_user(f"{writer} {agent}", stdin)
        assert out.stdout == b"" and out.stderr == b""
    assert states(fleet.guest_file()) == {("pi", "p-2"): "done"}


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{" + b" " * (200 * 1024) + b"}", "agent state file over 64 KiB: not read"),
        (b"\x1b]52;c;aGk=\x07{not json", "agent state file is not JSON: not read"),
    ],
    ids=["huge", "escapes-not-json"],  # the id rides in the environment: keep it short
)
def test_a_hostile_state_file_is_bounded_and_inert(
    tmp_path: Path, netns_guest, content: bytes, problem: str
) -> None:
    fleet = Fleet(tmp_path, netns_guest())
    fleet.as_user(f"mkdir -p ~/.local/state/sand && cat > ~/{STATE}", content)
    row = fleet.deep()
    assert row["agents"] == {"sessions": [], "problem": problem}
    assert row["conditions"]["Healthy"] is True  # the agents' word is not the guest's health
    proc = fleet.sand("status", "--deep")
    assert proc.returncode == 0 and f"dev-1: {problem}\n" in proc.stdout


def test_escapes_in_a_record_are_never_shown(tmp_path: Path, netns_guest) -> None:
    fleet = Fleet(tmp_path, netns_guest())
    evil = "\x1b]0;owned\x07\x1b[2J\u202eevil" + "y" * 500
    doc = {
        "v": 1,
        "sessions": [
            {"agent": "claude", "session": evil, "state": "working", "since": 1, "cwd": evil},
            {"agent": "rm -rf", "session": "a", "state": "working", "since": 1},
            {"agent": "pi", "session": "b", "state": "exploded", "since": 1},
            {"agent": "pi", "session": "c", "state": "idle", "since": "yesterday"},
        ],
    }
    fleet.as_user(f"mkdir -p ~/.local/state/sand && cat > ~/{STATE}", json.dumps(doc).encode())
    row = fleet.deep()
    [s] = row["agents"]["sessions"]
    assert row["agents"]["problem"] == "3 malformed session record(s) left out"
    assert not any(c in s["session"] + s["cwd"] for c in "\x1b\x07\u202e")
    assert len(s["session"]) <= 64 and len(s["cwd"]) <= 200
    proc = fleet.sand("status", "--deep")
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout
