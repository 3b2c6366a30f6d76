"""``sand shell VM -- CMD``: one command in the guest, its output streamed to ours.

Unlike :class:`~sand.guest.runner.SshRunner` (a fixed script, its output read
and bounded), this is for a person's own command: output goes straight to the
host's stdout and stderr as it comes, made inert on the way unless ``raw``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import stat
import sys

import asyncssh

from sand.errors import TransportError
from sand.terminal import InertBytes


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
        try:
            # Started with stdin closed (``<&-``), Python has no sys.stdin, and fd 0 may
            # since have gone to a file or socket sand opened: never read that.
            mode = os.fstat(0).st_mode if sys.stdin is not None else None
        except OSError:
            mode = None  # closed: the command reads EOF
        if mode is not None and not os.isatty(0):
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                await _forward_pipe(proc)
            else:
                # A file or a device (``< /dev/null`` from cron, systemd or CI): epoll cannot
                # watch those, and their reads do not wait, so they are read in a thread.
                while data := await asyncio.to_thread(os.read, 0, 1 << 16):
                    proc.stdin.write(data)
                    await proc.stdin.drain()
        proc.stdin.write_eof()


async def _forward_pipe(proc: asyncssh.SSHClientProcess[bytes]) -> None:
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
