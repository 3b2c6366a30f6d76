"""`sand status --deep` against real guests: netns sshd guests behind the limactl
stand-in, provisioned by a real `sand apply` (stand-in agents, a secret on tmpfs).

Healthy is True only while the guest answers SSH and holds what its VM declares;
taking an agent binary or a secret file away makes it False, naming what is gone;
a guest whose sshd hangs is reported "ssh unreachable" within the per-VM timeout,
several of them at once rather than one after another; and without --deep no
guest is contacted at all (its sshd logs nothing).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import stand_in_agents

pytestmark = pytest.mark.e2e

SECRET = "deep-canary-5e1f-secret-value"
HEAD = """\
apiVersion: sand/v1
project: deepe2e
backends:
  # Each VM is backed by its own guest, made beforehand: no base derived for them.
  laptop: {type: lima, lima_home: ./lima, derive_bases: false}
defaults: {image: debian-12, disk: 20GiB, memory: 2GiB}
secrets:
  NPM_TOKEN:
    from: {env: SAND_TEST_NPM}
vms:
"""
VM = """\
  - name: {name}
    agents: [claude, codex]
    secrets: [{{name: NPM_TOKEN, scope: ~/src}}]
"""


class Cli:
    def __init__(self, root: Path, guests: dict[str, Any]) -> None:
        self.root = root
        self.standin = StandIn.create(root, lima_home=root / "lima")
        (root / "sand.yaml").write_text(HEAD + "".join(VM.format(name=n) for n in guests))
        for name, guest in guests.items():
            self.standin.back_with_guest(name, guest)
        self.env = {
            **os.environ,
            **self.standin.env(),
            "SAND_STATE_DIR": str(root / "state"),
            "SAND_TEST_NPM": SECRET,
            "SAND_AGENT_SOURCE": str(stand_in_agents(root / "agents")),
            "NO_COLOR": "1",
        }
        self.env.pop("LIMA_HOME")
        proc = self.sand("apply", "--auto-approve")
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def sand(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "sand", *args], env=self.env, capture_output=True,
            text=True, timeout=300, cwd=self.root, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def status(self, *args: str) -> tuple[dict[str, Any], float]:
        """`sand status --json ARGS`: the rows by VM, and how long it took."""
        start = time.monotonic()
        proc = self.sand("status", "--json", *args)
        took = time.monotonic() - start
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert SECRET not in proc.stdout + proc.stderr
        return {r["vm"]: r for r in json.loads(proc.stdout)["vms"]}, took


def healthy(row: dict[str, Any]) -> Any:
    return row["conditions"]["Healthy"]


@contextmanager
def frozen_sshd(guest: Any) -> Iterator[None]:
    """The guest's sshd stopped in its tracks: the kernel still accepts connections
    on port 22, but no SSH banner ever comes (a hung guest, not a refusing one)."""
    sshd = [p for p in guest.guest_pids() if "[listener]" in " ".join(p.argv)]
    assert len(sshd) == 1, guest.guest_pids()
    os.kill(sshd[0].host_pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(sshd[0].host_pid, signal.SIGCONT)


def test_deep_health_names_what_the_guest_lacks(tmp_path: Path, netns_guest) -> None:
    guest = netns_guest()
    cli = Cli(tmp_path, {"dev-1": guest})

    rows, _ = cli.status("--deep")
    assert healthy(rows["dev-1"]) is True, rows["dev-1"]
    assert rows["dev-1"]["guest_health"] == []

    # An agent binary the VM declares is gone (sand's agents step put it there).
    guest.run_root(["rm", "-f", "/usr/local/bin/codex"], check=True)
    rows, _ = cli.status("--deep")
    assert healthy(rows["dev-1"]) is False
    assert rows["dev-1"]["guest_health"] == ["agent codex missing"]

    # And the secret's file on tmpfs (what a reboot does), named by the secret.
    guest.run_root(["sh", "-c", "rm -f /run/user/*/sand/env/*.sh /dev/shm/sand-*/env/*.sh"])
    proc = cli.sand("status", "--deep")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dev-1: not healthy: agent codex missing\n" in proc.stdout
    assert (
        "dev-1: not healthy: secret NPM_TOKEN missing (not on the guest's tmpfs for ~/src)\n"
        in proc.stdout
    )
    table = proc.stdout.splitlines()
    assert table[0].split() == [
        "VM", "BACKEND", "ID", "DESIRED", "OBSERVED", "SYNCED", "HEALTHY", "PROVISIONED",
    ]  # fmt: skip
    assert table[1].split()[6] == "False"
    assert SECRET not in proc.stdout + proc.stderr

    # Without --deep nobody looked: Healthy is what the listing says, no guest reason.
    rows, _ = cli.status()
    assert healthy(rows["dev-1"]) is True and rows["dev-1"]["guest_health"] is None


def test_hung_guests_are_reported_in_parallel_and_only_when_asked(
    tmp_path: Path, netns_guest
) -> None:
    guests = {name: netns_guest() for name in ("dev-1", "dev-2", "dev-3")}
    cli = Cli(tmp_path, guests)
    timeout = 4.0

    with frozen_sshd(guests["dev-2"]), frozen_sshd(guests["dev-3"]):
        # Without --deep no guest is contacted: dev-1's sshd logs nothing (sand's plan
        # would ask Lima guests whether their secrets survived; status must not), and
        # the hung ones cost nothing.
        before = guests["dev-1"].log_text()
        rows, quick = cli.status()
        assert guests["dev-1"].log_text() == before
        assert all(healthy(r) is True and r["guest_health"] is None for r in rows.values())

        rows, took = cli.status("--deep", "--timeout", str(timeout))
        assert guests["dev-1"].log_text() != before  # the log does show a deep check
        assert healthy(rows["dev-1"]) is True and rows["dev-1"]["guest_health"] == []
        for name in ("dev-2", "dev-3"):
            assert healthy(rows[name]) is False
            assert rows[name]["guest_health"] == [f"ssh unreachable: no answer within {timeout:g}s"]
        # Each hung guest had its timeout, both at once: one after the other would
        # take two timeouts on top of a plain status.
        assert timeout * 0.9 <= took - quick < timeout * 1.75, (quick, took)


def test_the_check_script_answers_each_check_and_reads_no_value(netns_guest) -> None:
    """HEALTH_SCRIPT itself, in a guest, as its user: one answer per check, in order."""
    from sand.survey.health import HEALTH_SCRIPT

    guest = netns_guest()
    root = f"/run/user/{guest.uid}/sand"
    setup = (
        f"mkdir -p {root}/env {root}/git && printf 'export A=x\\n' > {root}/env/s.sh && "
        f"echo token > {root}/git/full && : > {root}/git/empty && "
        f"ln -s {root}/git/full {root}/git/link && chown -R {guest.user} {root}"
    )
    guest.run_root(["sh", "-c", setup], check=True)
    checks = [
        "agent", "ls",  # on PATH
        "agent", "claude",  # nowhere
        "env", "env/s.sh", "A",
        "env", "env/s.sh", "B",
        "env", "env/gone.sh", "A",
        "file", "git/full",
        "file", "git/empty",
        "file", "git/link",  # a symlink is not what sand wrote
    ]  # fmt: skip
    res = guest.run_root(
        ["runuser", "-u", guest.user, "--", "/bin/sh", "-c", HEALTH_SCRIPT, "sand-health", *checks]
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.decode().split() == [
        "ok", "missing", "ok", "missing", "missing", "ok", "missing", "missing",
    ]  # fmt: skip
    assert res.stderr == b""
    # An unknown kind is refused, not guessed at.
    res = guest.run_root(["runuser", "-u", guest.user, "--", "/bin/sh", "-c", HEALTH_SCRIPT,
                          "sand-health", "rm", "-rf"])  # fmt: skip
    assert res.returncode == 2 and res.stdout == b""
