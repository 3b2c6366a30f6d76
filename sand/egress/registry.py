"""Proxmox guests' egress proxy on this host: who may use it, and the process serving it.

A Proxmox guest's packets are filtered by the PVE firewall, which matches addresses,
never names. For a deny policy that lists ``domains`` the firewall lets the VM reach one
more address: sand's egress proxy, a long-lived process on this host listening where
the backend's ``egress_proxy`` says (declared by whoever runs sand here; under
``sand sync`` pinned in the host's ``pins.yaml``, never chosen by the repository alone).
It is one process per project and backend (``python -m sand.egress.listener``), started
or adopted by the apply that provisions such a VM, stopped when the last one is gone.

Which VM a connection comes from, without trusting the guest: the PVE firewall does
not pin a VM's source address (sand sets no ``ipfilter``: a DHCP address is not known
when the firewall is written before the first start), so root in one VM could take
another's address. So a request must carry the VM's own credential
(``Proxy-Authorization``, basic: the VM's name and an HMAC of it under a key only this
host holds) **and** come from the address sand reaches that VM at (recorded at each
provisioning). A fork's disk holds its source's credential, but not its address; a VM
that takes another's address does not hold its credential.

Its files, in ``<state dir>/projects/<project>/egress/`` (0700):

- ``<backend>.<vm>.policy.json``: the VM's policy, as Lima's proxy reads it
  (``sand.egress.policy``), written with the VM's firewall;
- ``<backend>.<vm>.denied.jsonl``: what the proxy refused it (as on Lima);
- ``proxy-<backend>/key`` (0600), ``vms.json`` (per VM: its source address),
  ``run.json`` (the listener's pid and address), ``refused.jsonl`` (requests no VM's
  credential and address vouched for), ``daemon.log``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from sand.broker.store import process_runs
from sand.desired import DesiredVM
from sand.egress.policy import PolicyFile, read_policy
from sand.errors import StateError
from sand.manifest.egress import DENY, EgressPolicy
from sand.secrets.files import locked
from sand.state.paths import project_dir

START_PATIENCE = 15.0
# The listener's environment: enough to run Python, never the apply's (a secret's
# ``env:`` source is there).
KEPT_ENV = ("PATH", "HOME", "LANG", "PYTHONPATH", "SAND_STATE_DIR", "XDG_STATE_HOME")
LISTENER = "sand.egress.listener"


def egress_dir(project: str) -> Path:
    return project_dir(project) / "egress"


def proxy_dir(project: str, backend: str) -> Path:
    return egress_dir(project) / f"proxy-{backend}"


def policy_path(project: str, backend: str, vm: str) -> Path:
    return egress_dir(project) / f"{backend}.{vm}.policy.json"


def denial_log(project: str, backend: str, vm: str) -> Path:
    """The host's log of what ``vm``'s proxy refused (JSON lines), named as on Lima."""
    return egress_dir(project) / f"{backend}.{vm}.denied.jsonl"


def _private_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def write_policy(project: str, backend: str, vm: str, summary: str, policy: EgressPolicy) -> None:
    """``vm``'s policy where its proxy reads it: the listener reads it at each request,
    so a changed policy is in force at the next one."""
    denials = denial_log(project, backend, vm)
    file = PolicyFile.of(project, backend, vm, summary, policy, denials)
    _private_write(policy_path(project, backend, vm), file.to_bytes())


def _key(directory: Path) -> bytes:
    """This host's key for the backend's proxy credentials, made once."""
    path = directory / "key"
    with contextlib.suppress(FileNotFoundError):
        return path.read_bytes()
    with locked(directory / "key"):
        if not path.exists():
            _private_write(path, secrets.token_bytes(32))
        return path.read_bytes()


def credential(project: str, backend: str, vm: str) -> str:
    """``vm``'s proxy credential: the same at every provisioning (the guest's settings
    do not change with it), worthless without the key, which never leaves this host."""
    digest = hmac.new(_key(proxy_dir(project, backend)), vm.encode(), hashlib.sha256)
    return base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


def _read_vms(directory: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads((directory / "vms.json").read_bytes())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _update_vms(directory: Path, vm: str, source: str | None) -> dict[str, dict[str, str]]:
    with locked(directory / "vms"):
        vms = _read_vms(directory)
        if source is None:
            vms.pop(vm, None)
        else:
            vms[vm] = {"source": source}
        _private_write(directory / "vms.json", json.dumps(vms, indent=1).encode())
        return vms


def register(project: str, backend: str, vm: str, source: str, listen: str) -> str:
    """Let ``vm``, reached at ``source``, use the backend's proxy at ``listen``
    (started if it does not run there); the URL its guest is told, credential included
    (sent to the guest on stdin, never in an argv)."""
    directory = proxy_dir(project, backend)
    address = socket.gethostbyname(source)
    _update_vms(directory, vm, address)
    ensure_running(project, backend, listen)
    return f"http://{vm}:{credential(project, backend, vm)}@{listen}"


def proxied(vm: DesiredVM) -> bool:
    """``vm``'s egress goes through its backend's declared proxy: a deny policy that
    lists domains, on a backend whose owner declared one."""
    policy = vm.egress
    return (
        vm.egress_proxy is not None
        and policy is not None
        and policy.policy == DENY
        and bool(policy.domains)
    )


def access(project: str, vm: DesiredVM, guest_host: str) -> str | None:
    """At each provisioning or delivery of ``vm`` (reached at ``guest_host``): the URL
    its guest reaches the proxy at, the VM registered from its current address; None
    when its egress does not go through one (an entry it had goes)."""
    if not proxied(vm):
        forget(project, vm.backend, vm.name)
        return None
    assert vm.egress_proxy is not None
    return register(project, vm.backend, vm.name, guest_host, vm.egress_proxy)


def forget(project: str, backend: str, vm: str) -> None:
    """``vm`` is gone: its entry and policy go; with the last one, the listener stops."""
    directory = proxy_dir(project, backend)
    with contextlib.suppress(FileNotFoundError):
        policy_path(project, backend, vm).unlink()
    if not directory.is_dir():
        return
    if not _update_vms(directory, vm, None):
        stop(directory)


def vouched(directory: Path, authorization: str, peer: str) -> PolicyFile | None:
    """The policy of the VM whose credential ``authorization`` (a ``Proxy-Authorization``
    value) carries, when the request comes from that VM's address; None otherwise."""
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        vm, _, given = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    entry = _read_vms(directory).get(vm)
    if not isinstance(entry, dict) or entry.get("source") != peer:
        return None
    key = (directory / "key").read_bytes()
    want = base64.urlsafe_b64encode(hmac.new(key, vm.encode(), hashlib.sha256).digest())
    if not hmac.compare_digest(want.decode().rstrip("="), given):
        return None
    project, backend = _identity(directory)
    try:
        return read_policy(policy_path(project, backend, vm))
    except ValueError:
        return None


def _identity(directory: Path) -> tuple[str, str]:
    """(project, backend) of a proxy directory, ``.../projects/<p>/egress/proxy-<b>``."""
    return directory.parent.parent.name, directory.name.removeprefix("proxy-")


def _running(directory: Path) -> tuple[int, str] | None:
    """(pid, address:port) of the backend's listener when it runs."""
    try:
        run = json.loads((directory / "run.json").read_bytes())
        pid, listen = int(run["pid"]), str(run["listen"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return (pid, listen) if process_runs(pid, LISTENER.encode()) else None


def listener_of(project: str, backend: str) -> tuple[int, str] | None:
    """(pid, address:port) of the backend's listener when it runs."""
    return _running(proxy_dir(project, backend))


def registered(project: str, backend: str) -> dict[str, dict[str, str]]:
    """The VMs the backend's proxy vouches for: per VM, its source address."""
    return _read_vms(proxy_dir(project, backend))


def ensure_running(project: str, backend: str, listen: str) -> None:
    """The backend's listener serving at ``listen``: adopted when it already does,
    otherwise (re)started in a session of its own (an apply's Ctrl-C leaves it)."""
    directory = proxy_dir(project, backend)
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    with locked(directory / "start"):
        running = _running(directory)
        if running is not None and running[1] == listen:
            return
        if running is not None:
            stop(directory)  # the host's owner moved it
        address, _, port = listen.rpartition(":")
        env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
        with open(directory / "daemon.log", "ab") as log:
            subprocess.Popen(
                [sys.executable, "-m", LISTENER, project, backend, address, port],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
                close_fds=True,
            )
        deadline = time.monotonic() + START_PATIENCE
        while (found := _running(directory)) is None or found[1] != listen:
            if time.monotonic() > deadline:
                raise StateError(
                    f"sand's egress proxy did not start listening on {listen} within "
                    f"{START_PATIENCE:g}s (see {directory / 'daemon.log'})"
                )
            time.sleep(0.05)  # waiting on the listener's own run.json


def stop(directory: Path) -> None:
    """End the backend's listener (it removes its run.json as it goes)."""
    running = _running(directory)
    if running is None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(running[0], 15)
    deadline = time.monotonic() + START_PATIENCE
    while _running(directory) is not None and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting on the listener's own exit
