"""The one seam between the Lima backend and the machine Lima runs on (the *host*).

A :class:`HostRunner` runs commands on the Lima host -- ``limactl`` and the fixed
scripts beside it -- never inside a guest. Two implementations: :class:`LocalRunner`
(an asyncio subprocess per call) and :class:`RemoteRunner` (``remote.py``: one asyncssh connection,
opened on first use and shared by every call until :meth:`close`; each call is one exec
channel). Commands are always argv lists; for the remote host each element is
``shlex.quote``-d and the environment (``LIMA_HOME``) is set with ``env NAME=VALUE`` in
front, because sshd drops most environment requests.

The remote host's key is pinned: ``known_hosts`` (default ``~/.ssh/known_hosts``) must
hold it, and an unknown or changed key fails with a :class:`TransportError` naming the
host and the file. With ``identity`` set only that key is offered (no agent,
IdentitiesOnly-style); without it the agent and ``~/.ssh/config`` identities are used.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sand.backends.fence import Fence
from sand.errors import BackendError, TransportError
from sand.terminal import inert


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def err_tail(self, lines: int = 12) -> str:
        # limactl's stderr repeats what guests and hostagents said: inert before shown.
        text = inert(self.stderr.decode(errors="replace")).strip()
        return "\n".join(text.splitlines()[-lines:])


class HeldProcess(Protocol):
    """A command left running on the Lima host (the lease holder): lines in, lines out.
    When sand dies, its end of stdin closes and the command sees EOF."""

    async def readline(self, timeout: float) -> bytes:
        """The next line (b"" at EOF); a TransportError after ``timeout`` seconds."""
        ...

    async def write(self, data: bytes) -> None: ...

    async def close(self) -> None:
        """EOF on its stdin, then wait a moment for it to end (killed if it does not)."""
        ...


class HostRunner(Protocol):
    where: str  # for messages: "this machine" or "user@host:port"
    remote: bool

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Completed: ...

    async def start(self, argv: Sequence[str]) -> HeldProcess:
        """Start a command that keeps running, its stdin and stdout piped to sand."""
        ...

    async def close(self) -> None: ...


class FencedRunner:
    """Every command on the Lima host, local or over SSH, passes the backend's lease
    fence first (``sand.backends.fence``): the one choke point of Lima's writes."""

    def __init__(self, inner: HostRunner, fence: Fence) -> None:
        self.inner = inner
        self.fence = fence
        self.where = inner.where
        self.remote = inner.remote

    async def run(self, argv: Sequence[str], **options: Any) -> Completed:
        self.fence.check()
        return await self.inner.run(argv, **options)

    async def start(self, argv: Sequence[str]) -> HeldProcess:
        self.fence.check()
        return await self.inner.start(argv)

    async def close(self) -> None:
        await self.inner.close()


class LocalRunner:
    remote = False

    def __init__(self, *, backend: str, lima_home: str | None) -> None:
        self.backend = backend
        self.lima_home = lima_home
        self.where = "this machine"

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Completed:
        full_env = dict(os.environ)
        if self.lima_home is not None:
            full_env["LIMA_HOME"] = self.lima_home
        full_env.update(env or {})
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=full_env,
                start_new_session=True,
            )
        except FileNotFoundError:
            raise BackendError(
                f"{argv[0]!r} not found on {self.where} (is Lima installed and on PATH?)",
                backend=self.backend,
            ) from None
        except PermissionError as exc:
            raise BackendError(f"cannot run {argv[0]!r}: {exc}", backend=self.backend) from None
        try:
            out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
        except (TimeoutError, asyncio.CancelledError) as exc:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await proc.wait()
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise BackendError(
                f"{show_argv(argv)} did not finish within {timeout:.0f}s on {self.where}",
                backend=self.backend,
                transient=True,
            ) from None
        return Completed(tuple(argv), proc.returncode or 0, out, err)

    async def start(self, argv: Sequence[str]) -> HeldProcess:
        env = dict(os.environ)
        if self.lima_home is not None:
            env["LIMA_HOME"] = self.lima_home
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            raise BackendError(f"cannot run {argv[0]!r}: {exc}", backend=self.backend) from None
        return _LocalProcess(proc, self.where)

    async def close(self) -> None:
        return None


class _LocalProcess:
    def __init__(self, proc: asyncio.subprocess.Process, where: str) -> None:
        self.proc = proc
        self.where = where

    async def readline(self, timeout: float) -> bytes:
        assert self.proc.stdout is not None
        try:
            return await asyncio.wait_for(self.proc.stdout.readline(), timeout)
        except TimeoutError:
            raise TransportError(f"no answer within {timeout:.0f}s on {self.where}") from None

    async def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
            await self.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise TransportError(f"the process on {self.where} is gone: {exc}") from None

    async def close(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.is_closing():
            self.proc.stdin.close()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except TimeoutError:
            self._kill()
        except asyncio.CancelledError:
            self._kill()
            raise

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)


def show_argv(argv: Sequence[str]) -> str:
    if argv[:2] == ["sh", "-c"] or tuple(argv[:2]) == ("sh", "-c"):
        return f"sh script {argv[3] if len(argv) > 3 else ''}".strip()
    return " ".join(argv[:4])
