"""Reaping what the real-Lima tier started, at the start and at the end of a run.

A tier test cut short (its timeout, a kill) never reached its cleanup, and its Lima VM
went on running: the hostagent reparented to init, a TCG guest burning a core for 40
minutes. Each tier's project directory (``t-*`` in the rig user's home; the tier's
LIMA_HOME is inside it) holds ``owner.json``, naming the test process that made it.
:func:`reap_stale` (at the start of a run) reaps each directory whose owner is gone;
:func:`reap_owned` (at its end) each one this process made. To reap a directory is to
stop every process whose environment puts LIMA_HOME inside it (the hostagent and its
qemu, a limactl or a sand still running: Lima passes its environment down) -- SIGTERM,
then SIGKILL to what is left after a grace -- and to remove the directory, and with it
the instances in that LIMA_HOME.

The directories of a live owner (another run of the tier) are left alone, as are
processes whose LIMA_HOME is anywhere else (the rig user's own ``~/.lima``, which
``python -m tests.rig.lima run`` drives by hand).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from pathlib import Path

from tests.rig.guest import _owner_alive, _proc_start_time

ROOTS = "t-*"
OWNER = "owner.json"
# A directory with no owner file (made by a rig from before owner files, or being made
# this instant) is stale once older than the longest a tier test may run.
UNOWNED_AFTER = 3600.0
TERM_GRACE = 10.0  # what a process gets between SIGTERM and SIGKILL


def mark_owner(root: Path) -> None:
    """Name this process as ``root``'s owner."""
    pid = os.getpid()
    (root / OWNER).write_text(json.dumps({"owner_pid": pid, "owner_start": _proc_start_time(pid)}))


def owned_by_me(root: Path) -> bool:
    owner = _owner(root)
    return owner is not None and owner.get("owner_pid") == os.getpid() and _owner_alive(owner)


def stale(root: Path) -> bool:
    owner = _owner(root)
    if owner is None:
        with contextlib.suppress(OSError):
            return time.time() - root.stat().st_mtime > UNOWNED_AFTER
        return False
    return not _owner_alive(owner)


def _owner(root: Path) -> dict[str, object] | None:
    try:
        record = json.loads((root / OWNER).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def processes_under(directory: Path) -> list[int]:
    """Every live process whose environment's LIMA_HOME is ``directory`` or inside it."""
    inside = os.fspath(directory.resolve())
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue  # gone meanwhile, or not ours to read
        for entry in environ:
            if entry.startswith(b"LIMA_HOME="):
                home = os.path.normpath(entry.removeprefix(b"LIMA_HOME=").decode(errors="replace"))
                if (home == inside or home.startswith(inside + os.sep)) and running(int(proc.name)):
                    found.append(int(proc.name))
                break
    return sorted(found)


def running(pid: int) -> bool:
    """Running: not gone, and not a zombie waiting for its parent."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def stop(pids: list[int], grace: float = TERM_GRACE) -> None:
    """SIGTERM each of ``pids``; SIGKILL what still runs after ``grace`` seconds; return
    once none runs."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 30.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while any(running(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)  # polling the processes' state: they are not our children
        pids = [p for p in pids if running(p)]
        if not pids:
            return
    raise RuntimeError(f"processes {pids} outlived SIGKILL")


def reap(root: Path, grace: float = TERM_GRACE) -> list[int]:
    """Stop every process of ``root``'s LIMA_HOME and remove ``root``; the pids stopped."""
    pids = processes_under(root)
    stop(pids, grace)
    shutil.rmtree(root, ignore_errors=True)
    return pids


def reap_stale(home: Path, grace: float = TERM_GRACE) -> dict[Path, list[int]]:
    """Reap each tier directory in ``home`` whose owner is gone (a run cut short)."""
    return {root: reap(root, grace) for root in sorted(home.glob(ROOTS)) if stale(root)}


def reap_owned(home: Path, grace: float = TERM_GRACE) -> dict[Path, list[int]]:
    """Reap each tier directory in ``home`` that this process made."""
    return {root: reap(root, grace) for root in sorted(home.glob(ROOTS)) if owned_by_me(root)}
