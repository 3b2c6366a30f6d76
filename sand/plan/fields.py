"""Which of a VM's infrastructure fields differ between the manifest and the backend,
and what each difference costs (in place, restart, replace), by the backend's declared
mutability of each field (``Capabilities``)."""

from __future__ import annotations

from collections.abc import Mapping

from sand.backends.capabilities import Mutability
from sand.desired import DesiredVM
from sand.manifest.egress import ALLOW
from sand.observed import ObservedVM
from sand.plan.model import FieldChange

Policy = Mapping[str, Mutability]


def field_changes(vm: DesiredVM, current: ObservedVM, policy: Policy) -> tuple[FieldChange, ...]:
    """The infrastructure fields of ``vm`` whose observed value differs, each with
    whether it forces a replacement or a restart (by the backend's ``policy``), and
    whether the backend already holds the new value for the next boot."""
    desired = vm.infra()
    observed: dict[str, object] = {
        "image": (current.marker.image or None) if current.marker else None,
        "cpus": current.cpus,
        "cpu": current.cpu,
        "memory": current.memory,
        "disk": current.disk,
        "state": current.power if current.power in ("running", "stopped") else None,
        "protect": current.protect,
        # Placement is only compared when the manifest pins a node.
        "node": current.node if vm.node else None,
        "ports": [{"guest": g, "host": h} for g, h in current.ports]
        if current.ports is not None
        else None,
        "egress": current.egress,
    }
    if current.operator_protected:
        # An operator's protection is never proposed for lifting (make_plan notes it).
        observed["protect"] = None
    running = current.power == "running"
    out: list[FieldChange] = []
    for name, mutability in policy.items():
        before, after = observed.get(name), desired.get(name)
        if name == "egress" and before and after is None:
            after = ALLOW  # the manifest dropped its policy: the VM is opened, and says so
        if before is None or after is None or before == after:
            continue
        if name == "image" and vm.pool is not None and not vm.spare:
            continue  # a VM that claimed a spare is its own: its pool's image is the spares'
        forces = mutability is Mutability.REPLACE or (
            mutability is Mutability.GROW_ONLY
            and isinstance(before, int)
            and isinstance(after, int)
            and after < before
        )
        restart = mutability is Mutability.RESTART and running and vm.state == "running"
        waiting = name in current.pending and current.pending[name] == after
        out.append(FieldChange(name, before, after, forces, restart, pending_reboot=waiting))
    return tuple(out)
