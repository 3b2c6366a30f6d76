"""Errors of the Proxmox backend, each naming its layer: ``proxmox <backend>: ...``."""

from __future__ import annotations

import re

from sand.errors import BackendError

# 5xx answers PVE gives for a request that will fail the same way again: never retried.
_PERMANENT_5XX = re.compile(
    r"already exists|does not exist|protection mode enabled|is running - destroy failed"
    r"|not running|already running|is locked|is a template|if it's a template|shrinking disks"
    r"|Parameter verification failed|only root|not allowed|not supported|not implemented"
    r"|unable to parse|no such|checksum mismatch|No space left|invalid",
    re.IGNORECASE,
)
# Contention PVE resolves by itself: the cfs/storage lock, a busy config file.
LOCK_TIMEOUT = re.compile(r"can't lock file .* got timeout|got timeout", re.IGNORECASE)
NO_QUORUM = re.compile(r"no quorum", re.IGNORECASE)


class ProxmoxError(BackendError):
    """A Proxmox API call, task or precondition failed.

    ``status`` is the HTTP status when there was one, ``upid`` the task when a task
    failed; ``transient`` says a later attempt may succeed (5xx, connection trouble,
    lock contention, no quorum).
    """

    def __init__(
        self,
        backend: str,
        message: str,
        *,
        transient: bool = False,
        status: int | None = None,
        upid: str | None = None,
    ) -> None:
        super().__init__(f"proxmox {backend}: {message}", transient=transient)
        self.backend = backend
        self.status = status
        self.upid = upid  # the task that failed, for task failures
        self.attempts = 1  # requests sent before this answer (>1: an earlier one may have landed)
        self.detail = message


def is_transient_status(status: int, message: str) -> bool:
    """Whether an HTTP error answer is worth retrying."""
    if status in (401, 403):
        return False
    if LOCK_TIMEOUT.search(message) or NO_QUORUM.search(message):
        return True
    if status >= 500:
        return not _PERMANENT_5XX.search(message)
    return status in (408, 429)


def is_transient_task(exitstatus: str) -> bool:
    """Whether a failed task ended for a reason that goes away (lock contention, no quorum)."""
    return bool(LOCK_TIMEOUT.search(exitstatus) or NO_QUORUM.search(exitstatus))
