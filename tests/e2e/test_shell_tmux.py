"""`sand shell VM` keeps a persistent tmux session in a real guest.

The guest is a netns sshd behind the limactl stand-in; `sand shell` runs as a
person runs it, on a real pseudo-terminal, through the system ssh. A command
typed into the session keeps running after the connection is dropped (the ssh
client killed), and the next `sand shell` lands in the same session: one tmux
session in the guest, the same shell process, the same screen. `--new` makes a
second session; `-- CMD` still runs one command without tmux; a guest without
tmux gets a plain login shell and says so.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from tests.audit.helpers import audit_records
from tests.cli.helpers import as_from_a_terminal
from tests.limactl_standin import StandIn

pytestmark = pytest.mark.e2e

MANIFEST = """\
apiVersion: sand/v1
project: tmuxe2e
backends:
  laptop: {type: lima, lima_home: ./lima}
defaults: {image: debian-12, disk: 20GiB, memory: 2GiB, provision: false}
vms:
  - name: dev.1
"""
VM = "dev.1"
SESSION = "dev_1"  # tmux would turn the '.' into '_' anyway; sand names it so itself


class Terminal:
    """A command on a fresh pseudo-terminal of its own (its controlling tty), read back
    as raw bytes; what a person's terminal emulator would be given."""

    def __init__(self, argv: list[str], *, env: dict[str, str], cwd: Path) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))

        def own_terminal() -> None:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            as_from_a_terminal()

        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
            preexec_fn=own_terminal, close_fds=True,
        )  # fmt: skip
        os.close(slave)
        self.master = master
        self.output = bytearray()

    def _read(self, wait: float) -> bool:
        ready, _, _ = select.select([self.master], [], [], wait)
        if not ready:
            return True
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every process holding the terminal is gone
            return False
        if not data:
            return False
        self.output += data
        return True

    def expect(self, needle: bytes, timeout: float = 30.0) -> None:
        stop = time.monotonic() + timeout
        while needle not in self.output:
            if time.monotonic() > stop or not self._read(0.2):
                raise AssertionError(f"{needle!r} never appeared; the terminal showed:\n"
                                     f"{bytes(self.output)!r}")  # fmt: skip

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def drop(self) -> None:
        """The connection drops: the ssh client (and sand above it) die at once."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.close()

    def finish(self, timeout: float = 30.0) -> int:
        """Wait for the command to end by itself; its exit status."""
        stop = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < stop:
            self._read(0.2)
        while select.select([self.master], [], [], 0.1)[0] and self._read(0):
            pass  # what it wrote last
        code = self.proc.wait(timeout=1)
        self.close()
        return code

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.master)


class Cli:
    def __init__(self, root: Path, guest: Any) -> None:
        self.root = root
        self.guest = guest
        self.standin = StandIn.create(root, lima_home=root / "lima")
        (root / "sand.yaml").write_text(MANIFEST)
        self.standin.back_with_guest(VM, guest)
        self.env = {
            **os.environ,
            **self.standin.env(),
            "SAND_STATE_DIR": str(root / "state"),
            "TERM": "xterm",
            "NO_COLOR": "1",
        }
        self.env.pop("LIMA_HOME")
        self.env.pop("TMUX", None)
        proc = self.sand("apply", "--auto-approve")
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def sand(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sand", *args], env=self.env, capture_output=True,
            text=True, timeout=120, cwd=self.root, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def shell(self, *args: str) -> Terminal:
        return Terminal([sys.executable, "-m", "sand", "shell", *args], env=self.env,
                        cwd=self.root)  # fmt: skip

    def as_user(self, *argv: str) -> str:
        res = self.guest.run_root(["runuser", "-u", self.guest.user, "--", *argv])
        assert res.returncode == 0, (argv, res.stdout, res.stderr)
        return str(res.stdout.decode())

    def tmux(self, *args: str) -> list[str]:
        return self.as_user("tmux", *args).splitlines()

    def sessions(self) -> list[str]:
        """Each tmux session in the guest as NAME:CLIENTS-ATTACHED."""
        return sorted(self.tmux("list-sessions", "-F", "#{session_name}:#{session_attached}"))

    def wait_for(self, predicate: Any, what: str, timeout: float = 20.0) -> None:
        stop = time.monotonic() + timeout
        while not predicate():
            assert time.monotonic() < stop, what
            time.sleep(0.2)


def sleepers(guest: Any) -> list[int]:
    """The guest's processes running ``sleep 4242`` (what the test typed)."""
    return sorted(p.pid for p in guest.guest_pids() if p.argv == ["sleep", "4242"])


def test_a_dropped_connection_reattaches_the_same_session(tmp_path: Path, netns_guest) -> None:
    guest = netns_guest()
    cli = Cli(tmp_path, guest)

    term = cli.shell(VM)
    term.expect(b"$ ")  # the prompt of the shell inside tmux
    assert cli.sessions() == [f"{SESSION}:1"]
    # Something an agent would be doing: output on the screen, a process that runs on.
    term.type('echo "marker-$((6 * 7))"; echo $$ > ~/shell.pid; sleep 4242\r')
    term.expect(b"marker-42")
    cli.wait_for(lambda: sleepers(guest), "the sleep never started")
    sleeper = sleepers(guest)
    shell_pid = cli.as_user("cat", f"/home/{guest.user}/shell.pid").strip()

    term.drop()
    cli.wait_for(lambda: cli.sessions() == [f"{SESSION}:0"], "the client never went away")
    assert sleepers(guest) == sleeper  # it outlived the connection

    again = cli.shell(VM)
    again.expect(b"marker-42")  # the screen as it was left, drawn on the new terminal
    assert cli.sessions() == [f"{SESSION}:1"]  # the same, single session, attached again
    assert cli.tmux("list-panes", "-t", f"={SESSION}", "-F", "#{pane_pid}") == [shell_pid]
    assert sleepers(guest) == sleeper
    pane = "\n".join(cli.tmux("capture-pane", "-p", "-t", f"={SESSION}:"))
    assert "marker-42" in pane

    # --new: a second session beside it, a fresh shell; leaving it ends only that one.
    fresh = cli.shell("--new", VM)
    fresh.expect(b"$ ")
    assert cli.sessions() == [f"{SESSION}-2:1", f"{SESSION}:1"]
    new_pane = cli.tmux("list-panes", "-t", f"={SESSION}-2", "-F", "#{pane_pid}")
    assert new_pane != [shell_pid]
    fresh.type("exit\r")
    assert fresh.finish() == 0
    assert cli.sessions() == [f"{SESSION}:1"]

    # -- CMD: one command, its exit status, no tmux (and no session made for it).
    proc = cli.sand("shell", VM, "--", "sh", "-c", 'echo "tmux=[$TMUX]"; exit 3')
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "tmux=[]\n"
    assert cli.sessions() == [f"{SESSION}:1"]
    proc = cli.sand("shell", VM, "--new")
    assert proc.returncode == 1 and "put --new before the VM" in proc.stderr

    # The host's audit trail: each session opened; closed with its exit status, except
    # the one whose sand was killed with its connection (an open without a close).
    shells = [r for r in audit_records(tmp_path / "state") if r["kind"].startswith("shell.")]
    told = [(r["kind"], r.get("mode"), r.get("exit")) for r in shells]
    assert told == [
        ("shell.opened", "tmux", None),  # killed with its connection: never closed
        ("shell.opened", "tmux", None),  # again: still attached
        ("shell.opened", "tmux", None),  # --new
        ("shell.closed", None, 0),
        ("shell.opened", "command", None),
        ("shell.closed", None, 3),
    ]
    assert shells[3]["opened"] == shells[2]["seq"] and shells[5]["opened"] == shells[4]["seq"]

    again.drop()


def test_a_guest_without_tmux_gets_a_plain_login_shell(tmp_path: Path, netns_guest) -> None:
    guest = netns_guest()
    cli = Cli(tmp_path, guest)
    guest.run_root(["sh", "-c", "rm -f /usr/bin/tmux"], check=True)

    term = cli.shell(VM)
    term.expect(b"sand: no tmux in this guest: a plain login shell")
    term.type('echo "plain-$((1 + 1))"; exit 7\r')
    term.expect(b"plain-2")
    assert term.finish() == 7  # the shell's own exit status, as ssh returns it
    assert b"sand: no tmux" in term.output.split(b"plain-")[0]  # said once, first
    assert term.output.count(b"no tmux in this guest") == 1
