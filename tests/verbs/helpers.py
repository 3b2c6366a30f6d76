"""Test doubles for the far side of the verbs: real bash and git on the host
standing in for a guest, and a stand-in ``gh`` that records its argv."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from sand.guest.runner import DEFAULT_LIMIT, RunResult, read_capped, read_tail

GIT_ENV = {
    "GIT_AUTHOR_NAME": "Agent",
    "GIT_AUTHOR_EMAIL": "agent@example.test",
    "GIT_COMMITTER_NAME": "Agent",
    "GIT_COMMITTER_EMAIL": "agent@example.test",
    "GIT_CONFIG_NOSYSTEM": "1",
}


class LocalRunner:
    """Runs the verbs' fixed scripts with the host's bash and git, HOME=``home``."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.scripts: list[str] = []

    async def run(
        self, script: str, *, stdin: bytes = b"", limit: int = DEFAULT_LIMIT, timeout: float = 60.0
    ) -> RunResult:
        self.scripts.append(script)
        env = {
            "HOME": str(self.home),
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "LANG": "C.UTF-8",
            **GIT_ENV,
        }
        proc = await asyncio.create_subprocess_exec(
            "bash", "-c", script, "sand",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            cwd=self.home,
        )  # fmt: skip
        assert proc.stdin and proc.stdout and proc.stderr

        async def feed() -> None:
            assert proc.stdin
            proc.stdin.write(stdin)
            await proc.stdin.drain()
            proc.stdin.close()

        async with asyncio.timeout(timeout):
            _, out, err = await asyncio.gather(
                feed(), read_capped(proc.stdout, limit, "local"), read_tail(proc.stderr)
            )
            status = await proc.wait()
        return RunResult(status, out, err)


class CannedRunner:
    """A hostile guest: whatever the script, it answers with ``reply``."""

    def __init__(self, reply: bytes, status: int = 0, stderr: bytes = b"") -> None:
        self.reply, self.status, self.stderr = reply, status, stderr
        self.stdins: list[bytes] = []

    async def run(
        self, script: str, *, stdin: bytes = b"", limit: int = DEFAULT_LIMIT, timeout: float = 60.0
    ) -> RunResult:
        self.stdins.append(stdin)
        return RunResult(self.status, self.reply, self.stderr)


def git(cwd: Path, *args: str, home: Path | None = None) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(home or cwd)}
    res = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return res.stdout.strip()


_GH = r"""#!{python}
import json, os, sys
here = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(here, "gh-calls.jsonl"), "a") as f:
    f.write(json.dumps({{"argv": sys.argv[1:], "cwd": os.getcwd()}}) + "\n")
with open(os.path.join(here, "gh-scenario.json")) as f:
    scn = json.load(f)
a = sys.argv[1:]
if a[:2] == ["auth", "status"]:
    if not scn.get("authed", True):
        print("You are not logged into any GitHub hosts.", file=sys.stderr)
        sys.exit(1)
    sys.exit(0)
if a[:2] == ["pr", "list"]:
    print(json.dumps(scn.get("prs", [])))
    sys.exit(0)
if a[:1] == ["api"]:
    print(json.dumps({{"commit": {{"message": scn.get("message", "Add a feature\n\nBecause.")}}}}))
    sys.exit(0)
if a[:2] == ["pr", "create"]:
    print(scn.get("created", "https://github.com/acme/widget/pull/7"))
    sys.exit(0)
print("unexpected gh call", a, file=sys.stderr)
sys.exit(2)
"""


class GhStandin:
    """A ``gh`` executable in ``bin_dir`` that logs every argv and answers from a scenario."""

    def __init__(self, bin_dir: Path, **scenario: Any) -> None:
        bin_dir.mkdir(parents=True, exist_ok=True)
        self.dir = bin_dir
        self.path = bin_dir / "gh"
        self.path.write_text(_GH.format(python=sys.executable))
        self.path.chmod(0o755)
        self.set(**scenario)

    def set(self, **scenario: Any) -> None:
        (self.dir / "gh-scenario.json").write_text(json.dumps(scenario))

    @property
    def calls(self) -> list[list[str]]:
        log = self.dir / "gh-calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(line)["argv"] for line in log.read_text().splitlines()]


class ScriptedRunner:
    """A hostile guest that answers each fixed script with its own canned reply."""

    def __init__(self, replies: dict[str, list[bytes]]) -> None:
        self.replies = {k: list(v) for k, v in replies.items()}

    async def run(
        self, script: str, *, stdin: bytes = b"", limit: int = DEFAULT_LIMIT, timeout: float = 60.0
    ) -> RunResult:
        return RunResult(0, self.replies[script].pop(0), b"")
