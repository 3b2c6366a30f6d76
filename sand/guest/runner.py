"""Running a command in a guest: sand's one implementation, and the contract over it.

A :class:`GuestRunner` runs one *fixed* bash script -- a constant in sand, never
assembled from guest data -- with its data on stdin, and returns the output
bounded by ``limit`` so a hostile guest cannot make the host buffer gigabytes.
The verbs and the landing sweep are written against it; tests run the very
same scripts against real git on the host through a local runner.

:class:`SshRunner` is that runner over an SSH connection, and below it
:meth:`SshRunner.run_command` is the one place sand starts a guest process:
a command line exactly as sshd hands it to the login shell, with stdin from
bytes or a host file, stdout bounded in memory or streamed to a host file
(``preserve:``'s archives), stderr kept as a tail or merged into stdout
(provisioning steps, whose change markers and failure tail are one stream),
and a timeout that keeps what was read before it struck.

asyncssh is imported when a command runs, not with this module: the verbs'
pure modules import the protocol and the script helpers below.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Protocol

from sand.errors import GuestCommandError, TransportError
from sand.terminal import decode, one_line

if TYPE_CHECKING:
    import asyncssh

DEFAULT_LIMIT = 16 << 20
STDERR_TAIL = 4096
CHUNK = 1 << 16


@dataclass(frozen=True)
class RunResult:
    exit_status: int  # -1 when the process died of a signal
    stdout: bytes  # empty when it was streamed to a file
    stderr: bytes  # the last STDERR_TAIL bytes; empty when merged into stdout
    exit_signal: str = ""  # the signal's name, when it died of one


class GuestRunner(Protocol):
    async def run(
        self, script: str, *, stdin: bytes = b"", limit: int = DEFAULT_LIMIT, timeout: float = 60.0
    ) -> RunResult:
        """Run ``script`` with bash in the guest as its user (HOME is its home)."""
        ...


class StreamReader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class OutputTooLarge(GuestCommandError):
    def __init__(self, step: str, limit: int) -> None:
        super().__init__(step, None, f"(output exceeded {limit} bytes; stopped reading)")


class GuestTimeout(GuestCommandError):
    """The command had not finished after ``timeout`` seconds; it was closed.

    ``output`` is what it wrote to stdout before that, for a caller that can
    show it safely (provisioning scrubs its secret values out first); the
    message itself holds none of it."""

    def __init__(self, step: str, timeout: float, output: bytes) -> None:
        self.timeout = timeout
        self.output = output
        super().__init__(step, None, f"(timed out after {timeout:g}s)")


class _Collected:
    """What a stream delivered so far: kept in memory up to a limit, or written to a
    host file. Readable after a timeout cancelled the reading."""

    def __init__(self, step: str, limit: int | None, sink: BinaryIO | None = None) -> None:
        self.step, self.limit, self.sink = step, limit, sink
        self.chunks: list[bytes] = []
        self.size = 0

    async def take(self, stream: StreamReader) -> None:
        while data := await stream.read(CHUNK):
            self.size += len(data)
            if self.sink is not None:
                self.sink.write(data)
                continue
            if self.limit is not None and self.size > self.limit:
                raise OutputTooLarge(self.step, self.limit)
            self.chunks.append(data)

    def value(self) -> bytes:
        return b"".join(self.chunks)


async def read_capped(stream: StreamReader, limit: int, step: str) -> bytes:
    out = _Collected(step, limit)
    await out.take(stream)
    return out.value()


async def read_tail(stream: StreamReader, keep: int = STDERR_TAIL) -> bytes:
    tail = b""
    while data := await stream.read(CHUNK):
        tail = (tail + data)[-keep:]
    return tail


class SshRunner:
    """:class:`GuestRunner` over one SSH connection, as the guest's login user.

    ``step`` names what runs in errors (a call may name its own); ``where``
    names the guest in transport errors (``user@host:port``)."""

    def __init__(
        self, conn: asyncssh.SSHClientConnection, step: str = "guest script", *, where: str = ""
    ) -> None:
        self.conn = conn
        self.step = step
        self.where = where or "the guest"

    async def run(
        self, script: str, *, stdin: bytes = b"", limit: int = DEFAULT_LIMIT, timeout: float = 60.0
    ) -> RunResult:
        return await self.run_command(
            bash_command(script), stdin=stdin, limit=limit, timeout=timeout
        )

    async def run_command(
        self,
        command: str,
        *,
        stdin: bytes | BinaryIO = b"",
        stdout: BinaryIO | None = None,
        limit: int | None = DEFAULT_LIMIT,
        timeout: float | None = 60.0,
        merge_stderr: bool = False,
        step: str | None = None,
    ) -> RunResult:
        """Run ``command`` (a command line for the login shell) to its end.

        ``stdin``: bytes, or a binary host file read to its end. ``stdout``: a
        binary host file the output is copied to (then unbounded), else it is
        kept in memory up to ``limit`` bytes (``None``: all of it; for sand's
        own bundle scripts only). ``merge_stderr``: stderr joins stdout, in
        order. ``timeout=None``: no clock (a transfer bounded by its link).

        Raises :class:`GuestTimeout`, :class:`OutputTooLarge`, or
        TransportError when the connection fails or closes before the command
        reports how it ended; a non-zero exit is a result, not an error.
        """
        # here, not at the top: importing it loads asyncssh and cryptography
        import asyncssh

        what = step or self.step
        try:
            proc = await self.conn.create_process(
                command, encoding=None, stderr=asyncssh.STDOUT if merge_stderr else asyncssh.PIPE
            )
        except (OSError, asyncssh.Error) as exc:
            raise self._dropped(what, exc) from None
        out = _Collected(what, None if stdout is not None else limit, stdout)

        async def stderr_tail() -> bytes:
            return b"" if merge_stderr else await read_tail(proc.stderr)

        try:
            async with asyncio.timeout(timeout):
                _, _, err = await asyncio.gather(
                    _feed(proc, stdin), out.take(proc.stdout), stderr_tail()
                )
                done = await proc.wait()
        except TimeoutError:
            raise GuestTimeout(what, timeout or 0.0, out.value()) from None
        except (ConnectionError, asyncssh.Error) as exc:
            raise self._dropped(what, exc) from None
        finally:
            proc.close()
        return self._result(done, what, out.value(), err)

    async def converse(
        self,
        command: str,
        opening: bytes,
        reply: Callable[[bytes], Awaitable[tuple[bytes, float] | None]],
        *,
        marker: bytes,
        timeout: float,
        step: str | None = None,
        opening_limit: int = 1 << 16,
        on_output: Callable[[bytes], None] | None = None,
    ) -> RunResult:
        """Run ``command`` as a short conversation on its stdin and stdout (stderr merged):
        send ``opening``, wait for a line starting with ``marker``, ask ``reply`` what
        to send next (None: nothing), then send it, close stdin, and read to the end.

        ``timeout`` bounds everything up to the marker line; ``reply`` returns the
        payload with the time the rest may take (its own wait, e.g. for a gate, is not
        counted). Output before the marker is bounded by ``opening_limit``; after it,
        unbounded (for sand's own bundle scripts only, like ``limit=None``), and each
        piece of it is also handed to ``on_output`` as it arrives (progress). A command
        that ends without the marker line returns as it ended."""
        # here, not at the top: importing it loads asyncssh and cryptography
        import asyncssh

        what = step or self.step
        try:
            proc = await self.conn.create_process(command, encoding=None, stderr=asyncssh.STDOUT)
        except (OSError, asyncssh.Error) as exc:
            raise self._dropped(what, exc) from None
        out = _Collected(what, None)
        try:
            try:
                async with asyncio.timeout(timeout):
                    await _feed(proc, opening, eof=False)
                    line = await _until_line(proc.stdout, out, marker, opening_limit, what)
            except TimeoutError:
                raise GuestTimeout(what, timeout, out.value()) from None
            answer = await reply(line) if line is not None else None
            rest = timeout if answer is None else answer[1]
            try:
                async with asyncio.timeout(rest):
                    await _feed(proc, answer[0] if answer is not None else b"")
                    while data := await proc.stdout.read(CHUNK):
                        out.size += len(data)
                        out.chunks.append(data)
                        if on_output is not None:
                            on_output(data)
                    done = await proc.wait()
            except TimeoutError:
                raise GuestTimeout(what, rest, out.value()) from None
        except (ConnectionError, asyncssh.Error) as exc:
            raise self._dropped(what, exc) from None
        finally:
            proc.close()
        return self._result(done, what, out.value(), b"")

    def _dropped(self, what: str, exc: BaseException) -> TransportError:
        """The connection failed or closed during step ``what``: the transport's error."""
        return TransportError(f"SSH to {self.where} failed during step {what!r}: {exc}")

    def _result(
        self, done: asyncssh.SSHCompletedProcess, what: str, stdout: bytes, stderr: bytes
    ) -> RunResult:
        """A finished guest process as a result; one that neither exited nor was
        killed by a signal lost its connection."""
        signal = done.exit_signal[0] if done.exit_signal else ""
        if done.exit_status is None and not signal:
            raise TransportError(
                f"SSH to {self.where}: the connection closed before step {what!r} finished"
            )
        status = done.exit_status if done.exit_status is not None else -1
        return RunResult(status, stdout, stderr, signal)


async def _until_line(
    stream: StreamReader, out: _Collected, marker: bytes, limit: int, step: str
) -> bytes | None:
    """Read into ``out`` until it holds a whole line starting with ``marker``; that line
    (None when the stream ended first)."""
    while True:
        data = out.value()
        at = 0 if data.startswith(marker) else data.find(b"\n" + marker) + 1
        if at > 0 or data.startswith(marker):
            end = data.find(b"\n", at)
            if end >= 0:
                return data[at:end]
        if len(data) > limit:
            raise OutputTooLarge(step, limit)
        chunk = await stream.read(CHUNK)
        if not chunk:
            return None
        out.size += len(chunk)
        out.chunks.append(chunk)


async def _feed(
    proc: asyncssh.SSHClientProcess[bytes], data: bytes | BinaryIO, *, eof: bool = True
) -> None:
    # here, not at the top: importing it loads asyncssh and cryptography
    import asyncssh

    # A command that exits without reading all of its stdin is not a failure of
    # the feeding: how it ended is in its exit status.
    with contextlib.suppress(BrokenPipeError, ConnectionError, asyncssh.Error):
        if isinstance(data, bytes):
            if data:
                proc.stdin.write(data)
                await proc.stdin.drain()
        else:
            while chunk := data.read(CHUNK):
                proc.stdin.write(chunk)
                await proc.stdin.drain()
        if eof:
            proc.stdin.write_eof()


def bash_command(script: str) -> str:
    """The command line that runs ``script``: the script is a constant, quoted once."""
    return "exec bash -c " + shlex.quote(script) + " sand"


def failed(step: str, result: RunResult) -> GuestCommandError:
    """A guest error whose text is safe to print (the guest wrote it)."""
    lines = decode(result.stderr).splitlines()[-5:]
    return GuestCommandError(step, result.exit_status, "\n".join(one_line(ln) for ln in lines))


def guest_path_arg(path: str) -> bytes:
    """A checkout path for a script's stdin: ``~``-relative or absolute, NUL-free."""
    if "\0" in path or not (path == "~" or path.startswith(("~/", "/"))):
        raise ValueError(f"guest path {path!r} must be absolute or start with ~/")
    return path.encode() + b"\0"


# Shell prelude every script shares: expand a ~-relative path read from stdin.
EXPAND = r"""
expand() {
	case $1 in
	"~") printf '%s' "$HOME" ;;
	"~/"*) printf '%s/%s' "$HOME" "${1#"~/"}" ;;
	*) printf '%s' "$1" ;;
	esac
}
"""
