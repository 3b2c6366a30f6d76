"""What the ``sand sync`` tests run: a real git server holding the manifest, commits
pushed to it, and ``sand sync`` processes whose output is followed line by line."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from tests.required import require
from tests.rig._util import run as git_run
from tests.rig.gitserver import _GIT_ENV, GitServer

APPLYING = re.compile(r"sync: applying revision ([0-9a-f]{12})")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def private_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def pin_proxmox(host_dir: Path, host: str, port: int, ca_file: str = "pve-ca.pem") -> Path:
    """The host's ``pins.yaml`` (once): backend ``pve``'s address and CA, where the
    host's Proxmox token may be sent."""
    file = host_dir / "pins.yaml"
    if not file.exists():
        pin = {"host": host, "port": port, "ca_file": ca_file}
        file.write_text(yaml.safe_dump({"backends": {"pve": pin}}))
    return file


class Repo:
    """A repository on the git server and a way to push commits to it."""

    def __init__(self, server: GitServer, name: str, manifest: dict[str, Any]) -> None:
        self.server = server
        self.name = name
        self.url = server.create_repo(name, {"sand.yaml": yaml.safe_dump(manifest)})

    def head(self) -> str:
        return self.server.branches(self.name)["main"]

    def push(self, text: str | dict[str, Any], message: str = "change") -> str:
        """Commit ``sand.yaml`` (text, or a manifest dict) on main; the new sha."""
        if isinstance(text, dict):
            text = yaml.safe_dump(text, sort_keys=False)
        bare = self.server.repo_path(self.name)
        with tempfile.TemporaryDirectory(prefix="sand-sync-push-") as work:
            wt = Path(work) / "wt"
            git_run(["git", "clone", "-q", str(bare), str(wt)], env=_GIT_ENV)
            (wt / "sand.yaml").write_text(text)
            git_run(["git", "-C", str(wt), "commit", "-q", "-am", message], env=_GIT_ENV)
            git_run(["git", "-C", str(wt), "push", "-q", "origin", "main"], env=_GIT_ENV)
        return self.head()


class SyncProcess:
    """``sand sync`` in a process of its own, with its own state dir."""

    def __init__(
        self,
        workdir: Path,
        *args: str,
        env: dict[str, str] | None = None,
        wrap: tuple[str, ...] = (),
    ) -> None:
        self.workdir = workdir
        self.state_dir = workdir / "state"
        full_env = {
            **os.environ,
            "SAND_STATE_DIR": str(self.state_dir),
            "NO_COLOR": "1",
            **(env or {}),
        }
        self.argv = [sys.executable, "-m", "sand", "sync", *args]
        self.wrapped = bool(wrap)
        self.proc = subprocess.Popen(
            [*wrap, *self.argv],
            cwd=workdir,
            env=full_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=self.wrapped,  # a group of its own: see stop()
        )
        self.err: list[str] = []
        self.out: list[str] = []
        self.pumps = [
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True)
            for stream, sink in ((self.proc.stderr, self.err), (self.proc.stdout, self.out))
        ]
        for pump in self.pumps:
            pump.start()

    @staticmethod
    def _pump(stream: Any, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    def text(self) -> str:
        return "".join(self.err) + "".join(self.out)

    def applying(self) -> list[str]:
        """The revisions (12 hex) it began to apply, in order."""
        return [m[1] for line in self.err if (m := APPLYING.search(line))]

    def wait_for(
        self, predicate: Callable[[], bool], timeout: float = 60.0, poll: float = 0.05
    ) -> None:
        """Until ``predicate`` holds, looked at every ``poll`` seconds (a bench timing the
        moment looks more often)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            if self.proc.poll() is not None:
                for pump in self.pumps:  # its last lines: read to the end of its output
                    pump.join(10)
                if predicate():
                    return
                raise AssertionError(f"sand sync exited {self.proc.returncode}:\n{self.text()}")
            time.sleep(poll)
        raise AssertionError("timed out; output:\n" + self.text())

    def said(self, needle: str) -> bool:
        return needle in self.text()

    def kill(self) -> None:
        """kill -9: no goodbye, no release."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            if self.wrapped:
                # unshare ignores SIGTERM and does not pass it on: the sync inside is
                # told as a shell tells a foreground job, through its process group.
                os.killpg(self.proc.pid, signal.SIGTERM)
            else:
                self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def ticks_pass(sync: SyncProcess, git: Any, count: int = 3) -> None:
    """Return once ``count`` more of the sync's checks have fetched from ``git`` (a
    GitServer): what a test that nothing happens meanwhile waits for, not a fixed time."""

    def fetches() -> int:
        return sum(1 for path, _ok in git.request_log if "upload-pack" in path)

    start = fetches()
    sync.wait_for(lambda: fetches() >= start + count)


def git_available() -> bool:
    return shutil.which("git") is not None


@contextlib.contextmanager
def https_git(token: str, pki: tuple[str, str], monkeypatch: Any) -> Iterator[GitServer]:
    """The git server over HTTPS (a token goes nowhere else), its certificate trusted by
    every git this test and its ``sand`` processes run (``GIT_SSL_CAINFO``)."""
    require(git_available(), "git is not installed")
    monkeypatch.setenv("GIT_SSL_CAINFO", pki[0])
    with GitServer(token, host="127.0.0.1", tls=pki) as server:
        yield server


# A process of its own pid namespace (root): its pids mean nothing to the test's, as a
# process on another host. SIGKILL to unshare kills it too (--kill-child).
OTHER_HOST = ("unshare", "--pid", "--kill-child", "--mount-proc")


def can_be_another_host() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None
