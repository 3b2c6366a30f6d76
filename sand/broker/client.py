"""An apply's side of the broker: start or adopt it, grant a VM, revoke it.

``grant`` is called just before a VM's secrets are delivered (a create, a
reprovision, a delivery after a start): it makes sure the project's broker runs
and listens where this VM's guest reaches the host, draws the VM a new broker
credential (the one before it dies with it), records the VM's grants (never a
value), and hands the broker the token values. ``revoke`` is called when the VM
is gone; the last one stops the broker.

Where a guest reaches the host (docs/credentials.md): sand reaches a Proxmox or
any other guest at its own address, and the guest reaches this host at the
address this host sends from on that route, so the broker listens there (and
takes that VM's requests only from the VM's address). A Lima guest is reached
through a forward on the loopback: the broker listens on 127.0.0.1, which Lima's
user-mode network gives guests as its gateway, 192.168.5.2.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from sand.broker.access import RESTRICTED_LIMA_ADDRESS, RESTRICTED_LIMA_PORT, BrokerAccess
from sand.broker.store import (
    VMGrants,
    broker_dir,
    control_address,
    credential_hash,
    read_grants,
    update_grants,
)
from sand.desired.brokered import BrokerGrant
from sand.desired.spec import DesiredVM
from sand.errors import SecretError
from sand.manifest.egress import DENY
from sand.secrets.files import locked
from sand.state.paths import project_dir

# Lima's user-mode network: the host's loopback as the guests see it (host.lima.internal).
LIMA_HOST = "192.168.5.2"
START_PATIENCE = 15.0
# What the broker process inherits: enough to run Python and check TLS, never the
# apply's environment (a secret's env: source is there).
KEPT_ENV = (
    "PATH",
    "HOME",
    "LANG",
    "PYTHONPATH",
    "SAND_STATE_DIR",
    "XDG_STATE_HOME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
)


def where(guest_host: str) -> tuple[str, str, str]:
    """(the address the broker listens on, the one the guest reaches it at, the only
    source its requests may come from, "" for any) for a guest sand reaches at
    ``guest_host``."""
    address = socket.gethostbyname(guest_host)
    if ipaddress.ip_address(address).is_loopback:
        return "127.0.0.1", LIMA_HOST, ""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((address, 9))  # no packet is sent: this only picks the route
        local = str(probe.getsockname()[0])
    return local, local, address


def grant_vm(
    project: str, vm: DesiredVM, guest_host: str, jump: bool, values: Mapping[str, str]
) -> BrokerAccess | None:
    """``vm``'s access to the broker when it uses brokered secrets (None when not: a
    grant it had goes). ``jump``: sand reaches the guest through another host (a remote
    Lima host), which the broker on this one cannot serve."""
    if not vm.brokered:
        revoke(project, vm.name)
        return None
    if jump:
        raise SecretError(
            f"VM {vm.name!r} uses brokered secrets, but its guest runs on a remote Lima host, "
            "which cannot reach the broker on this one (docs/credentials.md)"
        )
    closed = vm.egress is not None and vm.egress.policy == DENY
    return grant(project, vm.name, guest_host, vm.brokered, values, restricted=closed)


def grant(
    project: str,
    vm: str,
    guest_host: str,
    grants: tuple[BrokerGrant, ...],
    tokens: Mapping[str, str],
    *,
    restricted: bool = False,
) -> BrokerAccess:
    """``restricted``: the VM has a deny egress policy; a Lima guest's network then
    reaches the host only through sand's forwards, the broker's among them."""
    directory = broker_dir(project)
    listen, reach, source = where(guest_host)
    _ensure_running(project, directory)
    port = int(str(_ask(directory, {"listen": listen})["port"]))
    credential = secrets.token_urlsafe(32)
    update_grants(directory, vm, VMGrants(credential_hash(credential), source, grants, listen))
    wanted = {g.secret: tokens[g.secret] for g in grants}
    _ask(directory, {"tokens": wanted, "reload": True})
    if restricted and reach == LIMA_HOST:
        return BrokerAccess(f"http://{RESTRICTED_LIMA_ADDRESS}:{RESTRICTED_LIMA_PORT}", credential)
    return BrokerAccess(f"http://{reach}:{port}", credential)


def revoke(project: str, vm: str) -> None:
    """``vm``'s credential dies: its entry goes; with the last one, the broker stops.
    A VM that never had one changes nothing (not even a directory made)."""
    directory = project_dir(project) / "broker"
    if not directory.is_dir() or vm not in read_grants(directory):
        return
    left = update_grants(directory, vm, None)
    try:
        _ask(directory, {"reload": True, "stop": not left})
    except (OSError, SecretError):
        return  # no broker answers: nothing runs to be told or stopped
    if not left:
        # Gone when the destroy returns: its listeners closed, its run.json removed.
        deadline = time.monotonic() + START_PATIENCE
        while (directory / "run.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # waiting on the broker's own cleanup


def _ensure_running(project: str, directory: Path) -> None:
    # One starter at a time: a second broker would take the first one's socket.
    with locked(directory / "start"):
        _start_unless_running(project, directory)


def _start_unless_running(project: str, directory: Path) -> None:
    with contextlib.suppress(OSError, SecretError):
        _ask(directory, {})
        return
    env = {k: os.environ[k] for k in KEPT_ENV if k in os.environ}
    with open(directory / "daemon.log", "ab") as log:
        subprocess.Popen(
            [sys.executable, "-m", "sand.broker", project],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,  # not the apply's: a Ctrl-C there leaves it running
            close_fds=True,
        )
    deadline = time.monotonic() + START_PATIENCE
    while True:
        try:
            _ask(directory, {})
            return
        except (OSError, SecretError):
            if time.monotonic() > deadline:
                raise SecretError(
                    f"the broker did not start within {START_PATIENCE:g}s "
                    f"(see {directory / 'daemon.log'})"
                ) from None
            time.sleep(0.05)  # waiting on its socket to answer


def _ask(directory: Path, message: dict[str, object]) -> dict[str, object]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        with control_address(directory) as address:
            conn.connect(address)
        conn.sendall(json.dumps(message).encode())
        conn.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := conn.recv(1 << 16):
            data += chunk
    reply = json.loads(data or b"{}")
    if not reply.get("ok"):
        raise SecretError(f"the broker refused a request ({reply.get('error', 'no answer')})")
    return dict(reply)
