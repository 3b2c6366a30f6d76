"""The Lima host over SSH: :class:`RemoteRunner`, one asyncssh connection opened on first
use and shared by every call until :meth:`close` (each call is one exec channel).

Each argv element is ``shlex.quote``-d and the environment (``LIMA_HOME``) is set with
``env NAME=VALUE`` in front, because sshd drops most environment requests. The remote
host's key is pinned (see :mod:`sand.backends.lima.runner`). This module (and with it
asyncssh) is imported only for a backend whose Lima host is remote
(:func:`sand.backends.lima.make_lima_backend`): a local Lima backend never loads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from sand import clock
from sand.backends.lima.runner import Completed, HeldProcess, show_argv
from sand.errors import BackendError, TransportError
from sand.guest import user_known_hosts


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
            "connect_timeout": clock.real(CONNECT_TIMEOUT),
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
                f"{show_argv(argv)} did not finish within {timeout:.0f}s on {self.where}",
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
        try:
            return bytes(await asyncio.wait_for(self.proc.stdout.readline(), timeout))
        except TimeoutError:
            raise TransportError(f"no answer within {timeout:.0f}s on {self.where}") from None
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(f"SSH to {self.where} failed: {exc}") from None

    async def write(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            await self.proc.stdin.drain()
        except (OSError, asyncssh.Error) as exc:
            raise TransportError(f"SSH to {self.where} failed: {exc}") from None

    async def close(self) -> None:
        with contextlib.suppress(OSError, asyncssh.Error):
            self.proc.stdin.write_eof()
        try:
            await asyncio.wait_for(self.proc.wait(), 10)
        except (OSError, asyncssh.Error, TimeoutError):
            self.proc.close()
