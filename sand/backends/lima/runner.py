"""The one seam between the Lima backend and the machine Lima runs on (the *host*).

A :class:`HostRunner` runs commands on the Lima host -- ``limactl`` and the fixed
scripts beside it -- never inside a guest. Two implementations: :class:`LocalRunner`
(an asyncio subprocess per call) and :class:`RemoteRunner` (one asyncssh connection,
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
import shlex
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from sand.errors import BackendError, TransportError
from sand.guest import user_known_hosts
from sand.terminal import inert

if TYPE_CHECKING:
    import asyncssh


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
                f"{_show(argv)} did not finish within {timeout:.0f}s on {self.where}",
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


@dataclass(frozen=True)
class RemoteTarget:
    host: str
    port: int
    user: str | None
    identity: str | None  # local private key path; None: agent and ssh_config
    known_hosts: str  # local known_hosts path
    lima_home: str  # on the remote host; relative means relative to the login directory

    @property
    def label(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}:{self.port}"


# Seconds for the remote Lima host to accept, answer and authenticate: a host that is
# up does it in well under a second; one that is down or hung is said so, not waited on.
CONNECT_TIMEOUT = 20


class RemoteRunner:
    remote = True

    def __init__(self, *, backend: str, target: RemoteTarget) -> None:
        self.backend = backend
        self.target = target
        self.where = target.label
        self.connections = 0  # SSH connections opened, for tests and budgets
        self._conn: asyncssh.SSHClientConnection | None = None
        self._lock = asyncio.Lock()

    def _options(self) -> dict[str, Any]:
        t = self.target
        opts: dict[str, Any] = {
            "host": t.host,
            "port": t.port,
            "connect_timeout": CONNECT_TIMEOUT,
            "keepalive_interval": 15,
            "keepalive_count_max": 8,
            "password": None,
            "kbdint_auth": False,
        }
        if t.user:
            opts["username"] = t.user
        if t.identity:
            # IdentitiesOnly: this key and nothing else (no agent, no default keys).
            opts["client_keys"] = [t.identity]
            opts["agent_path"] = None
        return opts

    async def _connection(self) -> asyncssh.SSHClientConnection:
        async with self._lock:
            if self._conn is not None and not self._conn.is_closed():
                return self._conn
            # here, not at the top: importing it loads asyncssh and cryptography
            import asyncssh

            t = self.target
            if not Path(t.known_hosts).is_file():
                raise TransportError(
                    f"cannot verify the remote Lima host {t.host}:{t.port}: the known_hosts "
                    f"file {t.known_hosts} does not exist (add the host's key to it, after "
                    "checking its fingerprint)",
                    transient=False,
                )
            try:
                known = user_known_hosts.read(t.known_hosts)
            except (OSError, ValueError) as exc:
                raise TransportError(
                    f"cannot read the known_hosts file {t.known_hosts}: {exc}", transient=False
                ) from None
            try:
                self._conn = await asyncssh.connect(
                    **self._options(), known_hosts=user_known_hosts.matcher(known)
                )
            except asyncssh.HostKeyNotVerifiable as exc:
                why = user_known_hosts.refusal(
                    "the remote Lima host", t.host, t.port, t.known_hosts, str(exc)
                )
                raise TransportError(why, transient=False) from None
            except asyncssh.PermissionDenied as exc:
                offered = f"only {t.identity}" if t.identity else "agent and ~/.ssh keys"
                raise TransportError(
                    f"SSH to the remote Lima host {self.where} was refused ({exc.reason}); "
                    f"keys offered: {offered}",
                    transient=False,
                ) from None
            except TimeoutError:
                # A port that accepts and then says nothing (sshd hung, a firewall that
                # swallows the handshake): the exception itself carries no words.
                raise TransportError(
                    f"cannot connect to the remote Lima host {self.where}: no SSH answer "
                    f"within {CONNECT_TIMEOUT}s"
                ) from None
            except (OSError, asyncssh.Error) as exc:
                raise TransportError(
                    f"cannot connect to the remote Lima host {self.where}: "
                    f"{str(exc) or type(exc).__name__}"
                ) from None
            self.connections += 1
            return self._conn

    def command_line(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
        assignments = {"LIMA_HOME": self.target.lima_home, **(env or {})}
        words = ["env", *(f"{k}={v}" for k, v in assignments.items()), *argv]
        return " ".join(shlex.quote(w) for w in words)

    async def run(
        self,
        argv: Sequence[str],
        *,
        stdin: bytes | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Completed:
        # here, not at the top: importing it loads asyncssh and cryptography
        import asyncssh

        conn = await self._connection()
        command = self.command_line(argv, env)
        try:
            if stdin is None:  # no input: the remote side reads EOF, never waits on us
                result = await conn.run(
                    command, stdin=asyncssh.DEVNULL, encoding=None, check=False, timeout=timeout
                )
            else:
                result = await conn.run(
                    command, input=stdin, encoding=None, check=False, timeout=timeout
                )
        except asyncssh.TimeoutError:
            raise BackendError(
                f"{_show(argv)} did not finish within {timeout:.0f}s on {self.where}",
                backend=self.backend,
                transient=True,
            ) from None
        except (OSError, asyncssh.Error) as exc:
            self._conn = None
            raise TransportError(
                f"SSH to the remote Lima host {self.where} failed: {exc}"
            ) from None
        out = result.stdout if isinstance(result.stdout, bytes) else b""
        err = result.stderr if isinstance(result.stderr, bytes) else b""
        code = result.exit_status if result.exit_status is not None else -1
        return Completed(tuple(argv), code, out, err)

    async def start(self, argv: Sequence[str]) -> HeldProcess:
        # here, not at the top: importing it loads asyncssh and cryptography
        import asyncssh

        conn = await self._connection()
        try:
            proc = await conn.create_process(self.command_line(argv), encoding=None)
        except (OSError, asyncssh.Error) as exc:
            self._conn = None
            raise TransportError(
                f"SSH to the remote Lima host {self.where} failed: {exc}"
            ) from None
        return _RemoteProcess(proc, self.where)

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            with contextlib.suppress(Exception):
                await conn.wait_closed()


class _RemoteProcess:
    """One exec channel of the shared connection: closing the connection (or sand
    dying, which closes it) ends the remote command's stdin."""

    def __init__(self, proc: asyncssh.SSHClientProcess[bytes], where: str) -> None:
        self.proc = proc
        self.where = where

    async def readline(self, timeout: float) -> bytes:
        # here, not at the top: importing it loads asyncssh and cryptography
        import asyncssh

        try:
            return bytes(await asyncio.wait_for(self.proc.stdout.readline(), timeout))
        except TimeoutError:
            raise TransportError(f"no answer within {timeout:.0f}s on {self.where}") from None
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(f"SSH to {self.where} failed: {exc}") from None

    async def write(self, data: bytes) -> None:
        # here, not at the top: importing it loads asyncssh and cryptography
        import asyncssh

        try:
            self.proc.stdin.write(data)
            await self.proc.stdin.drain()
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(f"SSH to {self.where} failed: {exc}") from None

    async def close(self) -> None:
        # here, not at the top: importing it loads asyncssh and cryptography
        import asyncssh

        with contextlib.suppress(OSError, asyncssh.Error):
            self.proc.stdin.write_eof()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except (OSError, asyncssh.Error, TimeoutError):
            self.proc.close()


def _show(argv: Sequence[str]) -> str:
    if argv[:2] == ["sh", "-c"] or tuple(argv[:2]) == ("sh", "-c"):
        return f"sh script {argv[3] if len(argv) > 3 else ''}".strip()
    return " ".join(argv[:4])
