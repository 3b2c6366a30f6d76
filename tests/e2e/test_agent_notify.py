"""`notify:` on the board, against a real guest (netns sshd behind the limactl stand-in):
a local webhook server receives exactly one POST per transition into needs-input and
done, none for a flap shorter than the debounce, none for what the first read found;
the desktop hears of each through notify-send (a stand-in on PATH that records its
argv). The webhook URL is a secret's value holding a canary: it reaches the server and
nowhere else -- no argv on the host or in the guest, no screen, no state file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_watch import Watch
from tests.cli.ui_pilot import board, observed, screen_text, until
from tests.e2e.test_agent_board import refreshed
from tests.e2e.test_agent_state import HEAD, Fleet
from tests.e2e.test_apply_proxmox_guests import everything_under
from tests.rig.argv import ArgvWatch

pytestmark = pytest.mark.e2e

CANARY = "hook-canary-8d1e44c0"
DEBOUNCE = 3
NOTIFY = f"""\
  - name: dev-1
secrets:
  HOOK_URL:
    from: {{env: SAND_TEST_HOOK_URL}}
notify:
  webhook: {{secret: HOOK_URL}}
  desktop: true
  debounce: {DEBOUNCE}
"""


class Webhook:
    """A local HTTP server that keeps every POST it is sent: (path, JSON body)."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, Any]]] = []
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                posts.append((self.path, json.loads(self.rfile.read(size))))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook/{CANARY}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def desktop_stand_in(directory: Path) -> Path:
    """A notify-send that appends its argv (one JSON list a line) to a file."""
    directory.mkdir(parents=True, exist_ok=True)
    record = directory / "calls.jsonl"
    script = directory / "notify-send"
    script.write_text(
        "#!/usr/bin/env python3\nimport json, sys\n"
        f"open({str(record)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    script.chmod(0o755)
    return record


async def test_each_transition_is_told_once_and_the_url_stays_secret(
    tmp_path: Path, netns_guest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook = Webhook()
    guest = netns_guest()
    desktop = desktop_stand_in(tmp_path / "desktop")
    monkeypatch.setenv("SAND_TEST_HOOK_URL", hook.url)
    fleet = Fleet(tmp_path, guest, HEAD + NOTIFY)
    for key, value in fleet.env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("PATH", f"{desktop.parent}:{fleet.env['PATH']}")
    monkeypatch.chdir(tmp_path)
    base = {"session_id": "c-1", "cwd": f"{fleet.home}/work"}
    fleet.as_user("mkdir -p ~/work")
    fleet.claude_hook("Stop", base)  # done before the board looked: where things stand

    def posted() -> list[str]:
        return [body["state"] for _path, body in hook.posts]

    try:
        app = board(tmp_path / "sand.yaml")
        with ArgvWatch(guest, host=True) as watch:
            async with app.run_test(size=(120, 30)) as pilot:
                await observed(pilot, app)
                await refreshed(pilot, app)
                assert posted() == []  # the first read is no news

                # A flap: needs input, then working again before the debounce.
                fleet.claude_hook("UserPromptSubmit", {**base, "prompt": "go"})
                fleet.claude_hook("Notification", {
                    **base, "message": "Claude needs your permission to use Bash",
                    "notification_type": "permission_prompt"})  # fmt: skip
                await refreshed(pilot, app)
                fleet.claude_hook("PostToolUse", {**base, "tool_name": "Bash"})
                time.sleep(DEBOUNCE + 0.5)
                await refreshed(pilot, app)
                assert posted() == []

                # Needs input for longer than the debounce: told once, however often read.
                fleet.claude_hook("Notification", {
                    **base, "message": "Claude needs your permission to use Bash",
                    "notification_type": "permission_prompt"})  # fmt: skip
                time.sleep(DEBOUNCE + 0.5)
                await refreshed(pilot, app)
                await until(pilot, lambda: posted() == ["needs-input"], "the POST")
                await refreshed(pilot, app)
                await refreshed(pilot, app)
                fleet.claude_hook("Stop", base)
                time.sleep(DEBOUNCE + 0.5)
                await refreshed(pilot, app)
                await until(pilot, lambda: posted() == ["needs-input", "done"], "the 2nd POST")
                await refreshed(pilot, app)
                time.sleep(0.5)
                shown = screen_text(app)
    finally:
        hook.close()
    assert posted() == ["needs-input", "done"]
    path, body = hook.posts[0]
    assert path == f"/hook/{CANARY}"
    assert (
        body["text"]
        == body["message"]
        == (f"dev-1: claude session c-1 needs input in {fleet.home}/work")
    )
    assert body["title"] == "sand: dev-1 claude needs input" and body["tags"] == ["needs-input"]
    assert (body["vm"], body["agent"], body["session"]) == ("dev-1", "claude", "c-1")
    calls = [json.loads(line) for line in desktop.read_text().splitlines()]
    assert calls == [
        ["--app-name=sand", "sand", "dev-1: claude needs input"],
        ["--app-name=sand", "sand", "dev-1: claude done"],
    ]
    # The URL went to the server only.
    assert watch.samples > 10 and watch.containing(CANARY) == []
    assert CANARY not in shown
    assert CANARY not in everything_under(tmp_path / "state")


def test_apply_watch_tells_a_transition_once_on_the_console_webhook_and_desktop(
    tmp_path: Path, netns_guest: Any
) -> None:
    """`sand apply --watch` reads the agents' state after each run when the manifest has
    notify:, and tells each transition once (debounce 0: at the first run that sees it)."""
    hook = Webhook()
    guest = netns_guest()
    desktop = desktop_stand_in(tmp_path / "desktop")
    notify = f"  - name: dev-1\nnotify:\n  webhook: {{url: '{hook.url}'}}\n  desktop: true\n"
    fleet = Fleet(tmp_path, guest, HEAD + notify + "  debounce: 0\n")
    fleet.as_user("mkdir -p ~/work")
    base = {"session_id": "w-1", "cwd": f"{fleet.home}/work"}
    env = {**fleet.env, "PATH": f"{desktop.parent}:{fleet.env['PATH']}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sand", "apply", "--watch", "--interval", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # Watch's line readers and waits, around a watch started with this fleet's env.
    watch = Watch.__new__(Watch)
    watch.proc, watch.err, watch.out = proc, [], []
    for stream, sink in ((proc.stderr, watch.err), (proc.stdout, watch.out)):
        threading.Thread(target=Watch._pump, args=(stream, sink), daemon=True).start()
    try:
        watch.wait_for(lambda: len(watch.runs()) >= 2)  # the first read has been made
        fleet.claude_hook("Notification", {
            **base, "message": "Claude needs your permission to use Bash",
            "notification_type": "permission_prompt"})  # fmt: skip
        watch.wait_for(lambda: len(hook.posts) == 1)
        runs = len(watch.runs())
        watch.wait_for(lambda: len(watch.runs()) >= runs + 3)
    finally:
        watch.stop()
        hook.close()
    assert [body["state"] for _path, body in hook.posts] == ["needs-input"]
    said = "".join(watch.err)
    assert said.count(f"agent: dev-1: claude session w-1 needs input in {fleet.home}/work") == 1
    calls = [json.loads(line) for line in desktop.read_text().splitlines()]
    assert calls == [["--app-name=sand", "sand", "dev-1: claude needs input"]]
