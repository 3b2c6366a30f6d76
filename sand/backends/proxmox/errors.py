"""Errors of the Proxmox backend, each naming its layer: ``proxmox <backend>: ...``.

PVE answers in English only. What its words mean is read here, once: the client
classifies every failed request and task into an :class:`ErrorKind` (and says whether
a later attempt may succeed), and every other module tests ``e.kind`` (or ``e.status``
where a plain HTTP status is the question), never the text.
"""

from __future__ import annotations

import re
from enum import StrEnum

from sand.errors import BackendError


class ErrorKind(StrEnum):
    """What a failed call means to the caller."""

    NOT_FOUND = "not-found"  # PVE: "... does not exist" (the VM, its config, a storage)
    EXISTS = "exists"  # PVE: "... already exists" (a vmid taken)
    # The config changed between read and write (a digest that no longer matches).
    CONFLICT = "conflict"
    LOCKED = "locked"  # the VM holds a lock (backup, clone, migrate ...)
    ALREADY_RUNNING = "already-running"  # a start of a VM that runs
    NOT_RUNNING = "not-running"  # a stop or shutdown of a VM that does not run
    AUTH = "auth"  # 401: the token was rejected
    FORBIDDEN = "forbidden"  # 403: the token lacks a privilege
    # A definite refusal that comes again on a retry: protected, a template, running,
    # shrinking, parameter verification, not implemented; and sand's own refusals.
    REFUSED = "refused"
    TRANSIENT = "transient"  # 5xx other than a refusal, 408/429, lock timeout, no quorum
    UNREACHABLE = "unreachable"  # no usable answer: connection, timeout, TLS, not JSON
    TASK_FAILED = "task-failed"  # a worker task ended with an error of no kind above
    TIMEOUT = "timeout"  # still running (a task, a lock, a clone) when sand stopped waiting


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

# PVE's words for the kinds callers act on, first match wins. Case as PVE writes them.
# "modified": "detected modified configuration - file changed by other user? Try again."
# (a stale digest on a config PUT); "checksum mismatch (file change by other user?)".
MESSAGE_KINDS: tuple[tuple[ErrorKind, re.Pattern[str]], ...] = (
    # pve-firewall: "no such IPSet 'NAME'" (API2/Firewall/IPSet.pm, load_config).
    (ErrorKind.NOT_FOUND, re.compile(r"does not exist|no such IPSet")),
    (ErrorKind.EXISTS, re.compile(r"already exists")),
    (ErrorKind.CONFLICT, re.compile(r"checksum mismatch|modified")),
    (ErrorKind.LOCKED, re.compile(r"is locked")),
    (ErrorKind.ALREADY_RUNNING, re.compile(r"already running")),
    (ErrorKind.NOT_RUNNING, re.compile(r"not running")),
)


class ProxmoxError(BackendError):
    """A Proxmox API call, task or precondition failed.

    ``kind`` says what it means (:class:`ErrorKind`; sand's own refusals are
    ``REFUSED``, or ``TRANSIENT`` when they may pass); ``status`` is the HTTP status
    when there was one, ``upid`` the task when a task failed; ``transient`` says a
    later attempt may succeed (5xx, connection trouble, lock contention, no quorum).
    """

    def __init__(
        self,
        backend: str,
        message: str,
        *,
        transient: bool = False,
        status: int | None = None,
        upid: str | None = None,
        kind: ErrorKind | None = None,
    ) -> None:
        super().__init__(f"proxmox {backend}: {message}", transient=transient)
        self.backend = backend
        self.status = status
        self.upid = upid  # the task that failed, for task failures
        self.attempts = 1  # requests sent before this answer (>1: an earlier one may have landed)
        self.detail = message
        if kind is None:
            kind = ErrorKind.TRANSIENT if transient else ErrorKind.REFUSED
        self.kind = kind


def message_kind(message: str) -> ErrorKind | None:
    """The kind PVE's words name, or None."""
    for kind, words in MESSAGE_KINDS:
        if words.search(message):
            return kind
    return None


def classify_answer(status: int, message: str) -> tuple[ErrorKind, bool]:
    """An HTTP error answer as (kind, transient)."""
    transient = is_transient_status(status, message)
    if status == 401:
        return ErrorKind.AUTH, transient
    if status == 403:
        return ErrorKind.FORBIDDEN, transient
    if LOCK_TIMEOUT.search(message) or NO_QUORUM.search(message):
        return ErrorKind.TRANSIENT, transient
    kind = message_kind(message)
    if kind is None:
        kind = ErrorKind.TRANSIENT if transient else ErrorKind.REFUSED
    return kind, transient


def classify_task(exitstatus: str) -> tuple[ErrorKind, bool]:
    """A failed task's exit status (PVE's reason, never its log) as (kind, transient)."""
    if is_transient_task(exitstatus):
        return ErrorKind.TRANSIENT, True
    return message_kind(exitstatus) or ErrorKind.TASK_FAILED, False


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


def retry_reason(e: BaseException) -> str:
    """A failed request in a few words: "PVE 503", "PVE unreachable"."""
    if not isinstance(e, ProxmoxError):
        return type(e).__name__
    if e.status:
        return f"PVE {e.status}"
    return "PVE unreachable" if e.kind is ErrorKind.UNREACHABLE else f"PVE {e.kind.value}"


def refused_connection(e: BaseException) -> bool:
    """Whether a connection error is, underneath requests' and urllib3's wrappers, a
    refused connection (an RST: no process listens at that address)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [e]
    while todo:
        cause = todo.pop()
        if cause is None or id(cause) in seen:
            continue
        seen.add(id(cause))
        if isinstance(cause, ConnectionRefusedError):
            return True
        todo += [cause.__cause__, cause.__context__, getattr(cause, "reason", None)]
        todo += [a for a in cause.args if isinstance(a, BaseException)]
    return False


def shortened(e: BaseException) -> str:
    text = str(e)
    return text if len(text) <= 300 else text[:300] + "..."
