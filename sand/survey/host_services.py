"""What this host serves its VMs, and whether it still runs: the plan's side.

Two of sand's promises live in processes on this host, not in the VMs: the broker
(brokered git, API and host credentials) and, for Proxmox guests whose deny policy
lists domains, the egress proxy. Each is started by the delivery that needs it. A
Proxmox VM outlives a restart of this host, or a kill of either process: it keeps
running while what it was told to use is gone (the broker answers nothing, the proxy
does not listen: it fails closed, never open). The listing cannot show that, so the
plan reads it here, from this host's own records (reads only: nothing is started), and
a VM that lost one is delivered to again, which starts it and tells the guest anew.
"""

from __future__ import annotations

from sand.broker.store import broker_dir_if_any, read_grants, serving
from sand.desired import DesiredState
from sand.egress.registry import listener_of, proxied, registered

BROKER_DOWN = (
    "the broker on this host is not running (this host restarted, or it was stopped): "
    "deliver again, which starts it"
)
PROXY_DOWN = (
    "the egress proxy on this host is not running (this host restarted, or it was "
    "stopped): deliver again, which starts it"
)


def services_lost(project: str, desired: DesiredState) -> dict[str, str]:
    """VM name -> why it must be delivered to again: it was granted the broker, or
    registered at its backend's egress proxy, on this host, and that no longer runs."""
    lost: dict[str, str] = {}
    directory = broker_dir_if_any(project)
    granted = read_grants(directory) if directory is not None else {}
    broker_down: bool | None = None  # asked once, and only when a VM's answer needs it
    stranded: dict[str, set[str]] = {}  # backend -> VMs behind its proxy, when it is down
    for vm in desired.vms:
        if vm.brokered and vm.name in granted:
            if broker_down is None:
                broker_down = not serving(project)
            if broker_down:
                lost[vm.name] = BROKER_DOWN
                continue
        if proxied(vm):
            if vm.backend not in stranded:
                behind = set(registered(project, vm.backend))
                down = bool(behind) and listener_of(project, vm.backend) is None
                stranded[vm.backend] = behind if down else set()
            if vm.name in stranded[vm.backend]:
                lost[vm.name] = PROXY_DOWN
    return lost
