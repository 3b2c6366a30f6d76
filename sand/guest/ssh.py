"""SSH to a guest with the stance the security model sets for each hop.

* Only the endpoint's identity is offered (IdentitiesOnly): no agent, no
  ~/.ssh/config, no default keys. A guest's sshd gives up after MaxAuthTries
  refusals, so an agent with six keys would lock a good key out.
* Host keys: policy "pin" trusts a key on first contact and refuses a changed
  one, from sand's own known_hosts under the state dir keyed by the endpoint's
  host-key alias (stable where an address is not) or, without one, by its
  address *and port* in OpenSSH's form (``host`` for 22, ``[host]:port``
  otherwise), so a key pinned for one sshd is never trusted for another on
  the same address. An alias may name one boot of a machine (Lima guests make
  new host keys at every start): a new boot is pinned afresh and drops the
  earlier boots' pins, a changed key within one boot is refused;
  policy "none" checks nothing (Proxmox guests: DHCP hands
  a fresh VM an address an old one used).
* A jump host (remote Lima) is the user's own machine: its key is pinned by
  its known_hosts file and the agent and ssh_config are allowed there.
* A booting guest refuses connections for a while, so connecting retries with
  backoff until a deadline; a changed host key is never retried.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh

from sand import activity, clock
from sand.defaults import GUEST_SSH_TRY
from sand.errors import ErrorLayer, TransportError
from sand.guest import user_known_hosts
from sand.guest.endpoint import GuestEndpoint, JumpHost
from sand.guest.pinfile import Pins, is_boot_of, pins_path, read_pins, write_pins
from sand.guest.user_known_hosts import known_hosts_name
from sand.retrying import Backoff, retry_async
from sand.secrets.files import locked

# What connect() yields: the verbs name it through this module, never asyncssh's.
Connection = asyncssh.SSHClientConnection

CONNECT_DEADLINE = 180.0  # a Proxmox guest can take minutes to boot and start sshd
ATTEMPT_TIMEOUT = GUEST_SSH_TRY
_BACKOFF_FIRST, _BACKOFF_MAX = 0.2, 5.0


class KnownHosts:
    """sand's known_hosts: OpenSSH format, one line per pinned key, by alias or
    by address and port (:func:`known_hosts_name`).

    A name for port 22 is written bare, as OpenSSH does, and also matches the
    ``[host]:22`` form older sands wrote; a bare name never matches another
    port. Hashed names and ``@cert-authority``/``@revoked`` lines (a hand edit)
    are never read as pins.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or pins_path()

    def keys(self, alias: str) -> list[asyncssh.SSHKey]:
        entries = self._lines()
        found = [k for name in _same_name(alias) for k in entries.get(name, [])]
        return [asyncssh.import_public_key(k) for k in dict.fromkeys(found)]

    def pin(self, alias: str, key: asyncssh.SSHKey, *, family: str = "") -> bool:
        """Record ``key`` for ``alias`` unless one is there; False if another is.

        With ``family``, ``alias`` names one boot of that machine and the pins of its
        other boots (``<family>.boot-<token>``) go: their keys are gone with them."""
        entry = " ".join(key.export_public_key("openssh").decode().split()[:2])
        with locked(self.path):
            entries = self._lines()
            current = [k for name in _same_name(alias) for k in entries.get(name, [])]
            if current:
                return entry in current  # pinned meanwhile (another run): agree or refuse
            if family:
                for name in [n for n in entries if is_boot_of(n, family)]:
                    del entries[name]
            entries[alias] = [entry]
            self._write(entries)
        return True

    def forget(self, alias: str) -> None:
        """Drop the pin for ``alias`` (the VM it named was deleted by sand)."""
        with locked(self.path):
            entries = self._lines()
            dropped = [entries.pop(name, None) for name in _same_name(alias)]
            if any(d is not None for d in dropped):
                self._write(entries)

    def _write(self, entries: Pins) -> None:
        write_pins(self.path, entries)

    def _lines(self) -> Pins:
        return read_pins(self.path)


def _same_name(name: str) -> tuple[str, ...]:
    """``name`` and the other spelling of the same port-22 name, if it has one."""
    if name.startswith("[") and name.endswith("]:22"):
        return (name, name[1:-4])
    if not name.startswith("["):
        return (name, f"[{name}]:22")
    return (name,)


def host_key_alias(endpoint: GuestEndpoint) -> str:
    """The name the endpoint's key is pinned under: its alias, else host and port."""
    return endpoint.host_key_alias or known_hosts_name(endpoint.host, endpoint.port)


def where(endpoint: GuestEndpoint) -> str:
    via = f" via {endpoint.jump.host}" if endpoint.jump else ""
    return f"{endpoint.user}@{endpoint.host}:{endpoint.port}{via}"


@contextlib.asynccontextmanager
async def connect(
    endpoint: GuestEndpoint,
    *,
    deadline: float = CONNECT_DEADLINE,
    known_hosts: KnownHosts | None = None,
    attempt_timeout: float = ATTEMPT_TIMEOUT,
) -> AsyncIterator[asyncssh.SSHClientConnection]:
    """An authenticated connection to the guest (and its jump host), closed on exit.

    Retried (``sand.retrying``, each retry said) until ``deadline`` seconds have passed."""
    if endpoint.host_key_policy not in ("pin", "none"):
        raise TransportError(
            f"unknown host-key policy {endpoint.host_key_policy!r}", transient=False
        )
    key = _load_identity(endpoint.identity)
    pins = known_hosts or KnownHosts()
    alias = host_key_alias(endpoint)
    tries = 0
    Opened = tuple[asyncssh.SSHClientConnection, asyncssh.SSHClientConnection | None, list[Any]]

    async def attempt() -> Opened:
        nonlocal tries
        tries += 1
        tunnel: asyncssh.SSHClientConnection | None = None
        try:
            pinned = pins.keys(alias) if endpoint.host_key_policy == "pin" else []
            if endpoint.jump is not None:
                tunnel = await _connect_jump(endpoint.jump)
            conn = await asyncio.wait_for(
                asyncssh.connect(
                    endpoint.host,
                    endpoint.port,
                    tunnel=tunnel if tunnel is not None else (),
                    username=endpoint.user,
                    client_keys=[key],
                    agent_path=None,
                    agent_forwarding=False,
                    x11_forwarding=False,
                    config=None,
                    preferred_auth="publickey",
                    password=None,
                    kbdint_auth=False,
                    known_hosts=(pinned, [], []) if pinned else None,
                    connect_timeout=clock.real(attempt_timeout),
                    login_timeout=clock.real(attempt_timeout),
                    keepalive_interval=15,
                    keepalive_count_max=4,
                ),
                timeout=clock.real(attempt_timeout * 2),
            )
        except asyncssh.HostKeyNotVerifiable:
            await _close(tunnel)
            raise TransportError(
                f"SSH to {where(endpoint)}: the host key differs from the one sand pinned for "
                f"{alias!r} in {pins.path}. Either the VM was recreated outside sand or "
                f"something is impersonating it; if you know it was recreated, delete the "
                f"{alias!r} line from that file.",
                transient=False,
            ) from None
        except BaseException:
            await _close(tunnel)
            raise
        return conn, tunnel, pinned

    activity.step(f"connecting over SSH to {where(endpoint)}", limit=deadline)
    try:
        conn, tunnel, pinned = await retry_async(
            attempt,
            # A booting guest refuses for a while: come back soon, then every few seconds.
            backoff=Backoff(
                attempts=None, initial=_BACKOFF_FIRST, cap=_BACKOFF_MAX, deadline=deadline
            ),
            retryable=lambda e: isinstance(e, OSError | asyncssh.Error),  # TimeoutError too
            layer=ErrorLayer.SSH,
            reason=_describe,
        )
    except (OSError, asyncssh.Error) as exc:
        raise TransportError(
            f"SSH to {where(endpoint)} failed after {tries} attempts over "
            f"{deadline:g}s: {_describe(exc)}"
        ) from None
    try:
        if endpoint.host_key_policy == "pin" and not pinned:
            server_key = conn.get_server_host_key()
            family = endpoint.host_key_family
            if server_key is None or not pins.pin(alias, server_key, family=family):
                raise TransportError(
                    f"SSH to {where(endpoint)}: another run pinned a different host key "
                    f"for {alias!r} in {pins.path} while this one connected",
                    transient=False,
                )
        yield conn
    finally:
        conn.close()
        await conn.wait_closed()
        await _close(tunnel)


# The key a guest's new host keys are pinned by: ssh-keygen -A always makes it, and a
# connection trusting only it negotiates it.
NEW_HOST_KEY = "/etc/ssh/ssh_host_ed25519_key.pub"


async def repin(
    conn: asyncssh.SSHClientConnection,
    endpoint: GuestEndpoint,
    *,
    known_hosts: KnownHosts | None = None,
) -> None:
    """The guest's SSH host keys were made anew by sand itself, over ``conn`` (a fork's
    ``fork-identity`` step): pin the new key, read over that same authenticated
    connection, in place of the one pinned for this boot. Without it the next
    connection in this boot would be refused as an impostor."""
    if endpoint.host_key_policy != "pin":
        return
    res = await conn.run(f"cat {NEW_HOST_KEY}", check=False, timeout=30)
    text = res.stdout if isinstance(res.stdout, str) else ""
    try:
        key = asyncssh.import_public_key(text.strip())
    except (asyncssh.KeyImportError, ValueError):
        raise TransportError(
            f"SSH to {where(endpoint)}: the guest's new host key ({NEW_HOST_KEY}) could not "
            "be read after sand made it; the next connection will be refused",
            transient=False,
        ) from None
    pins = known_hosts or KnownHosts()
    alias = host_key_alias(endpoint)
    pins.forget(alias)
    if not pins.pin(alias, key, family=endpoint.host_key_family):
        raise TransportError(
            f"SSH to {where(endpoint)}: another run pinned a host key for {alias!r} in "
            f"{pins.path} while this one made the guest's new one",
            transient=False,
        )


async def _connect_jump(jump: JumpHost) -> asyncssh.SSHClientConnection:
    # The user's own host: their agent, ssh_config and known_hosts apply (the latter read
    # with OpenSSH's port rule, as for the remote Lima host itself).
    path = jump.known_hosts or "~/.ssh/known_hosts"
    try:
        known = user_known_hosts.read(path)
    except (OSError, ValueError) as exc:
        raise TransportError(
            f"SSH to jump host {jump.host}:{jump.port}: cannot read {path}: {exc}",
            transient=False,
        ) from None
    options: dict[str, Any] = {
        "known_hosts": user_known_hosts.matcher(known),
        "connect_timeout": clock.real(ATTEMPT_TIMEOUT),
        "login_timeout": clock.real(ATTEMPT_TIMEOUT),
        "keepalive_interval": 15,
    }
    if jump.user:
        options["username"] = jump.user
    if jump.identity:
        options["client_keys"] = [str(Path(jump.identity).expanduser())]
    try:
        return await asyncssh.connect(jump.host, jump.port, **options)
    except asyncssh.HostKeyNotVerifiable as exc:
        why = user_known_hosts.refusal("jump host", jump.host, jump.port, path, str(exc))
        raise TransportError(f"SSH via {why}", transient=False) from None


def _load_identity(path: str) -> asyncssh.SSHKey:
    file = Path(path).expanduser()
    try:
        return asyncssh.read_private_key(file)
    except (OSError, asyncssh.KeyImportError) as exc:
        raise TransportError(
            f"cannot load the SSH identity {file}: {_describe(exc)}", transient=False
        ) from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, asyncssh.PermissionDenied):
        return "permission denied (the guest does not accept this identity, or not yet)"
    if isinstance(exc, TimeoutError):
        return "timed out"
    text = getattr(exc, "reason", "") or str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"


async def _close(conn: asyncssh.SSHClientConnection | None) -> None:
    if conn is not None:
        conn.close()
        with contextlib.suppress(Exception):
            await conn.wait_closed()
