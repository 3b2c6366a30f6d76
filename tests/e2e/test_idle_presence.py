"""Who uses a guest, as the deep check's one exchange tells it (the idle policy's facts):
a real guest's sshd and tmux, reached over real SSH as sand reaches it.

The presence line counts the SSH sessions open besides the check's own, the tmux
clients attached to the VM user's server, and when that server last saw a client come
or go; sand decides idle from these and the agents' state (``sand.plan.idle``).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest

from sand.agentstate import AgentReport, GuestPresence
from sand.survey.health import HEALTH_SCRIPT, split_presence

pytestmark = pytest.mark.e2e


def ssh_argv(guest: Any, *command: str, tty: bool = False) -> list[str]:
    return [
        "ssh", "-i", str(guest.client_key_path), "-o", "BatchMode=yes",
        "-o", f"UserKnownHostsFile={guest.known_hosts_path}", "-o", "StrictHostKeyChecking=yes",
        *(["-tt"] if tty else ["-T"]), f"{guest.user}@{guest.address}", *command,
    ]  # fmt: skip


def presence(guest: Any) -> GuestPresence:
    """The check's script run over SSH as sand runs it: its presence line, parsed."""
    out = subprocess.run(
        ssh_argv(guest, "/bin/sh", "/tmp/sand-health", "agents"),
        capture_output=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    head, _, _ = out.partition(b"--sand-agents--\n")
    answers, said = split_presence(head, AgentReport())
    assert answers == b"", out
    assert said is not None, out
    return said


@contextmanager
def session(argv: Sequence[str]) -> Iterator[subprocess.Popen[bytes]]:
    """An SSH session held open (its stdin kept open) until the block ends."""
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)


def until(probe: Any, want: Any, timeout: float = 20.0) -> GuestPresence:
    deadline = time.monotonic() + timeout
    while True:
        seen = probe()
        if want(seen) or time.monotonic() > deadline:
            return seen
        time.sleep(0.3)


def test_ssh_sessions_and_tmux_clients_are_counted_and_the_checks_own_is_not(
    netns_guest,
) -> None:
    guest = netns_guest()
    guest.run_root(["sh", "-c", "cat > /tmp/sand-health"], input=HEALTH_SCRIPT.encode(), check=True)
    before = presence(guest)
    assert (before.ssh_sessions, before.tmux_clients, before.tmux_changed) == (0, 0, 0)
    assert abs(before.now - time.time()) < 60  # the guest's clock, not a made-up number
    with session(ssh_argv(guest, "sleep", "120")):
        seen = until(lambda: presence(guest), lambda p: p.ssh_sessions == 1)
        assert (seen.ssh_sessions, seen.tmux_clients) == (1, 0)
    attached_at = int(time.time())
    with session(ssh_argv(guest, "tmux", "new-session", "-A", "-s", "dev-1", tty=True)):
        seen = until(lambda: presence(guest), lambda p: p.tmux_clients == 1)
        assert (seen.ssh_sessions, seen.tmux_clients) == (1, 1)
        assert seen.tmux_changed >= attached_at - 1
    # Detached (the connection dropped): the session lives on, no client is attached,
    # and the server's socket says when the last one left.
    left = until(lambda: presence(guest), lambda p: p.tmux_clients == 0 and not p.ssh_sessions)
    assert (left.ssh_sessions, left.tmux_clients) == (0, 0)
    assert left.tmux_changed >= attached_at - 1
    alive = ["runuser", "-u", guest.user, "--", "tmux", "has-session", "-t", "dev-1"]
    assert guest.run_root(alive).returncode == 0


def test_a_hostile_guests_presence_is_no_answer_and_nothing_sleeps_on_it(netns_guest) -> None:
    """The guest owns the programs the check calls: a `date` printing escapes and a
    flood, a `tmux` listing a million clients. What comes back is bounded numbers or
    no answer at all (then the VM is not idle), never the guest's text."""
    guest = netns_guest()
    guest.run_root(["sh", "-c", "cat > /tmp/sand-health"], input=HEALTH_SCRIPT.encode(), check=True)
    hostile_date = "#!/bin/sh\nprintf '\\033]52;c;cHduZWQ=\\a\\033[2J'; head -c 200000 /dev/zero\n"
    guest.run_root(["sh", "-c", "cat > /usr/local/bin/date && chmod 755 /usr/local/bin/date"],
                   input=hostile_date.encode(), check=True)  # fmt: skip
    out = subprocess.run(ssh_argv(guest, "/bin/sh", "/tmp/sand-health", "agents"),
                         capture_output=True, timeout=60, check=True).stdout  # fmt: skip
    head, _, _ = out.partition(b"--sand-agents--\n")
    assert split_presence(head, AgentReport())[1] is None
    guest.run_root(["rm", "/usr/local/bin/date"], check=True)
    flood = "#!/bin/sh\nyes client | head -n 1000000\n"
    guest.run_root(["sh", "-c", "cat > /usr/local/bin/tmux && chmod 755 /usr/local/bin/tmux"],
                   input=flood.encode(), check=True)  # fmt: skip
    out = subprocess.run(ssh_argv(guest, "/bin/sh", "/tmp/sand-health", "agents"),
                         capture_output=True, timeout=60, check=True).stdout  # fmt: skip
    head, _, _ = out.partition(b"--sand-agents--\n")
    _, seen = split_presence(head, AgentReport())
    assert seen is None  # a million clients is not a number a guest has: no answer
    assert len(out) < 200
