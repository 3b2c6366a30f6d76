"""The verbs' one SSH seam: a connection from :mod:`sand.provision.ssh`, and a
:class:`~sand.verbs.runner.Runner` over it.

Connecting (identity only, host-key pinning, the jump host) is provisioning's
code, not a second copy here; this module adds only what the verbs need on
top: bounded output, a timeout per script, and an SFTP client for ``sand cp``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import stat
from collections.abc import AsyncIterator

import asyncssh

from sand.errors import GuestCommandError, TransportError
from sand.guest.endpoint import GuestEndpoint
from sand.terminal import InertBytes
from sand.verbs.copy import CHUNK, Entry, entry_from_mode
from sand.verbs.runner import DEFAULT_LIMIT, RunResult, bash_command, read_capped, read_tail


class SshRunner:
    def __init__(self, conn: asyncssh.SSHClientConnection, step: str = "guest script") -> None:
        self.conn = conn
        self.step = step

    async def run(
        self, script: str, *, stdin: bytes = b"", limit: int = DEFAULT_LIMIT, timeout: float = 60.0
    ) -> RunResult:
        try:
            proc = await self.conn.create_process(bash_command(script), encoding=None)
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(f"starting a command in the guest failed: {exc}") from None
        try:
            async with asyncio.timeout(timeout):
                _, out, err = await asyncio.gather(
                    _feed(proc, stdin),
                    read_capped(proc.stdout, limit, self.step),
                    read_tail(proc.stderr),
                )
                done = await proc.wait()
        except TimeoutError:
            raise GuestCommandError(self.step, None, f"(timed out after {timeout:g}s)") from None
        except asyncssh.Error as exc:
            raise TransportError(f"the guest connection failed: {exc}") from None
        finally:
            proc.close()
        status = done.exit_status
        return RunResult(status if status is not None else -1, out, err)


async def _feed(proc: asyncssh.SSHClientProcess[bytes], data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionError, asyncssh.Error):
        if data:
            proc.stdin.write(data)
            await proc.stdin.drain()
        proc.stdin.write_eof()


@contextlib.asynccontextmanager
async def connect(endpoint: GuestEndpoint) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """The guest connection, made by provisioning's connector (short deadline:
    a person is waiting, and a verb is only for a running VM)."""
    from sand.provision.ssh import connect as provision_connect

    async with provision_connect(endpoint, deadline=30.0) as conn:
        yield conn


class SftpFS:
    """:class:`~sand.verbs.copy.GuestFS` over SFTP. Guest names that are not
    UTF-8 survive as lone surrogates (and so are skipped as unprintable)."""

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
    async with conn.start_sftp_client(path_errors="surrogateescape") as sftp:
        yield SftpFS(sftp)


async def run_streaming(
    conn: asyncssh.SSHClientConnection, argv: list[str], *, raw: bool = False
) -> int:
    """Run ``argv`` in the guest like ``ssh host CMD``: output streamed through
    inert (every terminal control sequence removed, :mod:`sand.terminal`) or,
    with ``raw``, byte for byte; stdin forwarded when it is a pipe or a file (a
    terminal gets EOF: this is for commands, ``sand shell`` without one is for
    people)."""
    command = shlex.join(argv)
    try:
        proc = await conn.create_process(command, encoding=None)
    except (OSError, asyncssh.Error) as exc:
        raise TransportError(f"starting {argv[0]!r} in the guest failed: {exc}") from None

    def write(fd: int, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    async def pump(stream: asyncssh.SSHReader[bytes], fd: int) -> None:
        # One sanitiser per stream: a sequence split across reads is still removed.
        clean = None if raw else InertBytes()
        while data := await stream.read(1 << 16):
            write(fd, clean.feed(data) if clean else data)
        if clean:
            write(fd, clean.feed(b"", final=True))

    # stdin is forwarded on the side: when the command exits, whatever stdin
    # is still waiting for (a pipe nobody closes) must not keep sand running.
    feeding = asyncio.create_task(_forward_stdin(proc))
    try:
        await asyncio.gather(pump(proc.stdout, 1), pump(proc.stderr, 2))
        done = await proc.wait()
    finally:
        feeding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeding
        proc.close()
    if done.exit_status is not None:
        return done.exit_status
    name = done.exit_signal[0] if done.exit_signal else ""
    try:
        return 128 + signal.Signals["SIG" + name].value
    except KeyError:
        return 255


async def _forward_stdin(proc: asyncssh.SSHClientProcess[bytes]) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionError, asyncssh.Error):
        if not os.isatty(0):
            mode = os.fstat(0).st_mode
            if stat.S_ISREG(mode):
                while data := os.read(0, 1 << 16):
                    proc.stdin.write(data)
                    await proc.stdin.drain()
            else:
                reader = asyncio.StreamReader()
                loop = asyncio.get_running_loop()
                transport, _ = await loop.connect_read_pipe(
                    lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(0, "rb", closefd=False)
                )
                try:
                    while data := await reader.read(1 << 16):
                        proc.stdin.write(data)
                        await proc.stdin.drain()
                finally:
                    transport.close()
        proc.stdin.write_eof()
