"""The append-only audit log file: one writer at a time, whole records, torn ones owned up to.

Appending (``AuditLog.append``):

- The file is opened ``O_APPEND`` and ``flock``-ed for the read-the-tail-then-write
  step, so concurrent sand processes each link their record to the one really before it
  (the kernel drops the lock of a process that dies, SIGKILL included).
- A record is one ``write``. A writer killed during a large one can leave a partial
  line; the next writer finds the file not ending in a newline, ends that line and
  appends an ``audit.torn`` record naming the fragment's offset, length and hash, so the
  fragment is reported by ``verify`` forever after, never silently dropped or healed.
- fsync policy: a record is not fsync-ed on its own (a killed process loses nothing the
  kernel already holds, and an fsync each would cost more than the 1 ms an append may
  take); every checkpoint fsyncs the log before it writes ``head.json``, so a power
  loss can lose at most the records after the last checkpoint, and the log verifies up
  to there.
- Every ``CHECKPOINT_EVERY`` records a checkpoint is signed (see ``seal.py``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sand.audit import seal
from sand.audit.chain import GENESIS, PREFIX, TORN, encode, record_hash
from sand.errors import StateError
from sand.state.private import ensure_private_dir, open_private

LOG_FILE = "log.jsonl"
CHECKPOINT_EVERY = 1000
_WINDOW = 1 << 16


@dataclass(frozen=True)
class Tail:
    seq: int  # of the last whole record, 0 for none
    link: str  # its hash, GENESIS for none
    fragment: tuple[int, int] | None  # (offset, length) of a torn last line


class AuditLog:
    def __init__(self, directory: Path) -> None:
        self.directory = ensure_private_dir(directory)
        self.path = directory / LOG_FILE
        self._fd: int | None = None
        # (file size after our last write, our record's seq and hash): saves reading the
        # tail again when no other process wrote since
        self._known: tuple[int, int, str] | None = None
        self._sealer: seal.Sealer | None = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def append(self, kind: str, body: Mapping[str, Any]) -> int:
        """Append one record; its sequence number."""
        return self.append_many([(kind, body)])

    def append_many(self, records: Iterable[tuple[str, Mapping[str, Any]]]) -> int:
        """Append records in one locked step; the last one's sequence number."""
        return self._locked_append(records, seal_now=False)[0]

    def checkpoint(self) -> seal.Claim:
        """Sign the log as it stands now: a checkpoint record, fsync, ``head.json``."""
        claim = self._locked_append((), seal_now=True)[1]
        assert claim is not None  # sealing was asked for
        return claim

    def _locked_append(
        self, records: Iterable[tuple[str, Mapping[str, Any]]], *, seal_now: bool
    ) -> tuple[int, seal.Claim | None]:
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                self._signer()  # a new log: its key exists from its first record on
            known = self._known
            tail = Tail(known[1], known[2], None) if known and known[0] == size else _tail(fd, size)
            seq, link = tail.seq, tail.link
            out: list[bytes] = []
            claim: seal.Claim | None = None

            def add(line: bytes) -> None:
                nonlocal seq, link
                out.append(line)
                seq += 1
                link = record_hash(line)

            if tail.fragment is not None:
                out.append(b"\n")  # ends the fragment's line: it stays, and is named next
                add(encode(seq + 1, link, TORN, _torn_body(fd, *tail.fragment)))
            for kind, body in records:
                add(encode(seq + 1, link, kind, dict(body)))
                if seq % CHECKPOINT_EVERY == 0:
                    claim = self._signer().sign(seq, link)
                    add(self._signer().checkpoint_line(claim))
            if seal_now:
                claim = self._signer().sign(seq, link)
                add(self._signer().checkpoint_line(claim))
            data = b"".join(out)
            _write_all(fd, data)
            if claim is not None:
                os.fsync(fd)  # the records a checkpoint vouches for are on disk before it
                seal.write_head(self.directory, claim)
            self._known = (size + len(data), seq, link)
            return seq, claim
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def _signer(self) -> seal.Sealer:
        if self._sealer is None:
            self._sealer = seal.Sealer.of_host(self.directory)
        return self._sealer

    def _open(self) -> int:
        if self._fd is not None and not _same_file(self._fd, self.path):
            # moved aside or deleted by a person while this process (a long sand sync)
            # held it open: what follows goes to the file at the path, not to a lost inode
            self.close()
            self._known = None
        if self._fd is None:
            self._fd = open_private(self.path, os.O_RDWR | os.O_APPEND)
        return self._fd


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _torn_body(fd: int, offset: int, length: int) -> dict[str, Any]:
    digest = hashlib.sha256()
    at = offset
    while at < offset + length:
        chunk = os.pread(fd, min(1 << 20, offset + length - at), at)
        if not chunk:
            break
        digest.update(chunk)
        at += len(chunk)
    return {
        "fragment_offset": offset,
        "fragment_bytes": length,
        "fragment_sha256": digest.hexdigest(),
        "note": "a writer was killed mid-append; the fragment is not a record",
    }


def _rfind_newline(fd: int, before: int) -> int:
    """The offset of the last newline before ``before``, -1 when there is none."""
    end = before
    while end > 0:
        start = max(0, end - _WINDOW)
        at = os.pread(fd, end - start, start).rfind(b"\n")
        if at >= 0:
            return start + at
        end = start
    return -1


def _tail(fd: int, size: int) -> Tail:
    if size == 0:
        return Tail(0, GENESIS, None)
    last_nl = _rfind_newline(fd, size)
    fragment = (last_nl + 1, size - last_nl - 1) if last_nl < size - 1 else None
    if last_nl < 0:
        return Tail(0, GENESIS, fragment)
    start = _rfind_newline(fd, last_nl) + 1
    line = os.pread(fd, last_nl - start, start)
    match = PREFIX.match(line)
    if match is None:
        raise StateError(
            f"the audit log {_path_of(fd)} ends in a line that is not a record; "
            "nothing more is recorded until it is looked into (sand audit verify)"
        )
    return Tail(int(match[1]), record_hash(line), fragment)


def _path_of(fd: int) -> str:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return "(audit log)"
