"""The real-Lima tier's reaper (tests/rig/limareap.py), against real processes planted
as a run cut short leaves them -- detached from the test (reparented to init, as a
hostagent and its qemu are), LIMA_HOME in their environment -- without booting Lima."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.rig import limareap
from tests.rig.guest import _proc_start_time
from tests.rig.limareap import running

# A stand-in for a hostagent or its qemu: records its pid, then waits to be killed;
# "stubborn" ignores SIGTERM, as a guest that will not shut down does.
PLANT = """
import os, signal, sys, time
if sys.argv[2] == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(sys.argv[1], "w").write(str(os.getpid()))
while True:
    time.sleep(60)
"""


def plant(pidfile: Path, lima_home: Path, kind: str = "plain") -> int:
    """A process detached from this one (``setsid -f``: its parent exits, so it is
    init's), with ``LIMA_HOME=lima_home``; its pid once it runs."""
    env = {**os.environ, "LIMA_HOME": str(lima_home)}
    argv = ["setsid", "-f", sys.executable, "-c", PLANT, str(pidfile), kind]
    subprocess.run(argv, env=env, check=True, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not (pidfile.is_file() and pidfile.read_text()):
        assert time.monotonic() < deadline, "the planted process never started"
        time.sleep(0.05)
    pid = int(pidfile.read_text())
    return pid


def tier_root(home: Path, name: str, owner: dict[str, object] | None) -> Path:
    """A tier's directory as Tier makes it: an instance in its LIMA_HOME, and its owner."""
    root = home / name
    (root / "lima" / "dev-1").mkdir(parents=True)
    (root / "lima" / "dev-1" / "lima.yaml").write_text("images: []\n")
    if owner is not None:
        (root / "owner.json").write_text(json.dumps(owner))
    return root


def gone_owner() -> dict[str, object]:
    """The owner record of a process that has ended."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    record = {"owner_pid": proc.pid, "owner_start": _proc_start_time(proc.pid) or 1}
    proc.wait()
    return record


def test_a_run_cut_short_is_reaped_at_the_start_and_nothing_else(tmp_path: Path) -> None:
    home = tmp_path / "home"
    left = tier_root(home, "t-left", gone_owner())
    busy = tier_root(home, "t-busy", {"owner_pid": 1, "owner_start": _proc_start_time(1)})
    pids = tmp_path / "pids"
    pids.mkdir()
    agent = plant(pids / "agent", left / "lima")
    qemu = plant(pids / "qemu", left / "lima", "stubborn")
    others = plant(pids / "others", busy / "lima")  # another run's, still going
    by_hand = plant(pids / "by-hand", home / ".lima")  # the rig user's own Lima
    try:
        reaped = limareap.reap_stale(home, grace=0.5)
        assert reaped == {left: sorted([agent, qemu])}
        assert not running(agent) and not running(qemu)
        assert not left.exists()
        assert running(others) and running(by_hand) and busy.is_dir()
    finally:
        limareap.stop([p for p in (agent, qemu, others, by_hand) if running(p)], grace=0.5)


def test_what_this_run_made_is_reaped_at_its_end(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    mine = home / "t-mine"
    mine.mkdir()
    limareap.mark_owner(mine)
    (mine / "lima" / "dev-1").mkdir(parents=True)
    theirs = tier_root(home, "t-theirs", {"owner_pid": 1, "owner_start": _proc_start_time(1)})
    pids = tmp_path / "pids"
    pids.mkdir()
    hostagent = plant(pids / "hostagent", mine / "lima")
    others = plant(pids / "others", theirs / "lima")
    try:
        assert limareap.reap_stale(home, grace=0.5) == {}  # this run is alive
        assert limareap.reap_owned(home, grace=0.5) == {mine: [hostagent]}
        assert not running(hostagent) and not mine.exists()
        assert running(others) and theirs.is_dir()
    finally:
        limareap.stop([p for p in (hostagent, others) if running(p)], grace=0.5)


def test_a_directory_with_no_owner_is_left_until_no_test_could_still_own_it(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    fresh = tier_root(home, "t-fresh", None)
    old = tier_root(home, "t-old", None)
    past = time.time() - limareap.UNOWNED_AFTER - 60
    os.utime(old, (past, past))
    assert limareap.reap_stale(home, grace=0.5) == {old: []}
    assert fresh.is_dir() and not old.exists()
