"""The fence every request to a backend passes while a lease is held
(``sand.backends.lease``): one check before each API request (the Proxmox client) and
each command on the Lima host (the host runner), so no write of a holder whose lease may
have expired leaves sand, whatever the call site.

A renewal task alone does not do it: a holder paused past its lease (SIGSTOP, a laptop's
lid, a migrated VM) wakes with writes under way and its renewal not yet due, and its
next write (a config, a clone) raced the renewal's discovery that another host had
taken the lease and begun writing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from sand.errors import ErrorLayer, SandError


def margin(ttl: float) -> float:
    """Seconds before its lease's expiry a holder stops sending: a request that passed
    the fence just in time still travels, and is carried out, after it."""
    return min(5.0, ttl / 6)


class LeaseExpired(SandError):
    """The holder's own clock says its lease may have expired: nothing more is sent."""

    layer = ErrorLayer.LEASE

    def __init__(self, backend: str) -> None:
        super().__init__(
            f"lease on {backend} expired while this run was paused; nothing more was "
            "written; the next apply settles it"
        )


class Fence:
    """The check every request to one backend passes (the Proxmox API client, the Lima
    host runner), so no write of a holder whose lease may have expired leaves sand.

    The deadline is the holder's own: counted on its monotonic clock from *before* the
    request that took or renewed the lease was sent (the record it wrote expires no
    sooner), less :func:`margin`. Monotonic, because the holder cannot tell a pause from
    the wall clock; real seconds, as the ttl is, because other hosts read the expiry in
    the record as real time (``SAND_TIME_SCALE`` does not shorten a lease). Without a
    lease held there is nothing to fence (``sand shell``, a plan)."""

    def __init__(self, backend: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self.monotonic = monotonic
        self.deadline: float | None = None  # None: no lease held through this fence
        # Told once, the first time a request is refused (keep() stops the run then);
        # may be called from a worker thread.
        self.on_expiry: Callable[[LeaseExpired], None] | None = None

    def hold(self, sent: float, ttl: float) -> None:
        """The lease was taken or renewed by a request sent at ``sent`` (this clock)."""
        deadline = sent + ttl - margin(ttl)
        self.deadline = deadline if self.deadline is None else max(self.deadline, deadline)

    def left(self) -> float:
        """Seconds the lease surely stays this holder's (infinite when none is held)."""
        return float("inf") if self.deadline is None else self.deadline - self.monotonic()

    def check(self) -> None:
        """Before a request is sent: :class:`LeaseExpired` once the lease may have expired."""
        if self.left() > 0:
            return
        expired = LeaseExpired(self.backend)
        told, self.on_expiry = self.on_expiry, None
        if told is not None:
            told(expired)
        raise expired

    def end(self) -> None:
        """The holding is over (released, or lost and the run stopped)."""
        self.deadline, self.on_expiry = None, None
