"""ArgvWatch: catch a secret in any process's argv while something runs.

sand promises that tokens and secrets "never touch argv" -- they must not
appear in a host or guest process listing.  A single ``ps`` after the fact
proves nothing (the offending process is long gone), so this samples
/proc/*/cmdline in a background thread for the whole operation: every process
in the given netns guests and, with ``host=True``, every process on the host.

    with ArgvWatch(guest) as watch:
        await provision(guest, token=...)
    assert watch.containing(token) == []

Sampling is a few milliseconds apart, so a process has to live at least
that long to be seen; ``samples`` says how many passes were made so a test
can assert the watch actually ran.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import TracebackType

from tests.rig.guest import NetnsGuest


def _host_argvs() -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue  # exited while we looked
        if raw:
            out.append(tuple(a.decode(errors="replace") for a in raw.split(b"\0")[:-1]))
    return out


class ArgvWatch:
    """Collects every distinct argv seen while active (a context manager)."""

    def __init__(self, *guests: NetnsGuest, host: bool = True, interval: float = 0.002) -> None:
        self.guests = guests
        self.host = host
        self.interval = interval
        self.seen: set[tuple[str, ...]] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ArgvWatch:
        self._thread = threading.Thread(target=self._loop, name="sand-rig-argv", daemon=True)
        self._thread.start()
        # Make sure at least one pass happened before the watched work starts.
        while self.samples == 0 and self._thread.is_alive():
            time.sleep(0.001)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            # Without a time limit: a pass under load can take a while, and a thread
            # still sampling after the block would count what runs after it (a test's
            # own search for its canary) as seen while watching.
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            batch: set[tuple[str, ...]] = set()
            if self.host:
                # Host-wide /proc already includes guest processes (their
                # PID namespaces are children of ours).
                batch.update(_host_argvs())
            else:
                for guest in self.guests:
                    batch.update(tuple(p.argv) for p in guest.guest_pids())
            self.seen |= batch
            self.samples += 1
            self._stop.wait(self.interval)

    def containing(self, needle: str) -> list[tuple[str, ...]]:
        """Every argv seen that contains `needle` anywhere."""
        return sorted(argv for argv in self.seen if any(needle in a for a in argv))
