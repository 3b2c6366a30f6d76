"""A guest's files as ``sand cp`` sees them: the :class:`GuestFS` contract and its entries.

Stdlib only: the copy logic is written (and tested) against this protocol;
:mod:`sand.guest.sftp` implements it over SSH.
"""

from __future__ import annotations

import contextlib
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Entry:
    kind: str  # file | dir | symlink | other
    mode: int  # permission bits
    size: int = 0


def entry_from_mode(st_mode: int, size: int = 0) -> Entry:
    if stat.S_ISLNK(st_mode):
        kind = "symlink"
    elif stat.S_ISDIR(st_mode):
        kind = "dir"
    elif stat.S_ISREG(st_mode):
        kind = "file"
    else:
        kind = "other"
    return Entry(kind, stat.S_IMODE(st_mode), size)


class GuestFS(Protocol):
    """The guest's files, as ``sand cp`` needs them (SFTP in :mod:`sand.guest.sftp`)."""

    async def lstat(self, path: str) -> Entry | None: ...
    async def stat(self, path: str) -> Entry | None: ...
    async def realpath(self, path: str) -> str: ...
    async def listdir(self, path: str) -> list[tuple[str, Entry]]: ...
    def read(self, path: str) -> contextlib.AbstractAsyncContextManager[AsyncIterator[bytes]]: ...
    async def write(self, path: str, local_fd: int, mode: int) -> None: ...
    async def mkdir(self, path: str) -> None: ...
    async def symlink(self, target: str, path: str) -> None: ...
