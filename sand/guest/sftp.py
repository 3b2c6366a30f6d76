"""The SFTP :class:`~sand.guest.fs.GuestFS` of ``sand cp``, over a guest connection.

Guest names that are not UTF-8 survive as lone surrogates (and so are skipped
as unprintable by the copy). A refusal by the guest's SFTP server leaves
:func:`open_sftp` as :class:`GuestRefused`, so no caller handles asyncssh's types.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

import asyncssh

from sand.errors import ErrorLayer, SandError
from sand.guest.fs import Entry, entry_from_mode

CHUNK = 4 << 20


class GuestRefused(SandError):
    """The guest's SFTP server refused a request (no permission, no such directory)."""

    layer = ErrorLayer.SFTP

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"the guest refused: {reason}")


class SftpFS:
    """:class:`~sand.guest.fs.GuestFS` over an SFTP client."""

    def __init__(self, sftp: asyncssh.SFTPClient) -> None:
        self.sftp = sftp

    async def lstat(self, path: str) -> Entry | None:
        try:
            return _entry(await self.sftp.lstat(path))
        except asyncssh.SFTPNoSuchFile:
            return None

    async def stat(self, path: str) -> Entry | None:
        try:
            return _entry(await self.sftp.stat(path))
        except asyncssh.SFTPNoSuchFile:
            return None

    async def realpath(self, path: str) -> str:
        return str(await self.sftp.realpath(path))

    async def listdir(self, path: str) -> list[tuple[str, Entry]]:
        names = await self.sftp.readdir(path)
        return [(str(n.filename), _entry(n.attrs)) for n in names if n.filename not in (".", "..")]

    @contextlib.asynccontextmanager
    async def read(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        async with self.sftp.open(path, "rb", encoding=None) as f:

            async def chunks() -> AsyncIterator[bytes]:
                while data := await f.read(CHUNK):
                    assert isinstance(data, bytes)  # encoding=None: the file is binary
                    yield data

            yield chunks()

    async def write(self, path: str, local_fd: int, mode: int) -> None:
        async with self.sftp.open(path, "wb", encoding=None) as f:
            while data := os.read(local_fd, CHUNK):
                await f.write(data)
        await self.sftp.chmod(path, mode)

    async def mkdir(self, path: str) -> None:
        await self.sftp.mkdir(path)

    async def symlink(self, target: str, path: str) -> None:
        await self.sftp.symlink(target, path)


def _entry(attrs: asyncssh.SFTPAttrs) -> Entry:
    return entry_from_mode(attrs.permissions or 0, attrs.size or 0)


@contextlib.asynccontextmanager
async def open_sftp(conn: asyncssh.SSHClientConnection) -> AsyncIterator[SftpFS]:
    """An SFTP session on ``conn``; an SFTP refusal inside the block is :class:`GuestRefused`."""
    try:
        async with conn.start_sftp_client(path_errors="surrogateescape") as sftp:
            yield SftpFS(sftp)
    except asyncssh.SFTPError as exc:
        raise GuestRefused(str(exc.reason)) from None
