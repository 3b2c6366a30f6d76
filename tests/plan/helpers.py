"""Builders for pure planner tests: a manifest in text, observations as records."""

from __future__ import annotations

from dataclasses import replace

from sand.backends.abilities import capabilities_of
from sand.backends.lima.backend import LimaBackend
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.desired import DesiredState, DesiredVM, build_desired
from sand.manifest import parse_manifest
from sand.observed import Marker, Observation, ObservedVM, Ownership

MANIFEST = """\
apiVersion: sand/v1
project: demo
backends:
  pve:
    type: proxmox
    host: pve.test
    node: pve1
    pool: sand
    storage: local-lvm
    template: 9000
    token_file: pve.token
    identity: id_ed25519
  laptop:
    type: lima
defaults:
  backend: pve
  cpus: 2
vms:
  - name: a
  - name: b
    memory: 16GiB
  - name: c
    backend: laptop
    image: debian-12
    ports: [{guest: 3000, host: 3000}]
"""

# The capabilities the backends themselves declare: the planner is tested against them.
PVE_POLICY = capabilities_of(ProxmoxBackend)
LIMA_POLICY = capabilities_of(LimaBackend)
POLICIES = {"pve": PVE_POLICY, "laptop": LIMA_POLICY}


def desired(text: str = MANIFEST) -> DesiredState:
    return build_desired(parse_manifest(text), bundle_digest="bundle-v1")


def observed_from(vm: DesiredVM, identity: str = "", **changes: object) -> ObservedVM:
    """The VM as a backend would show it right after sand converged it."""
    base = ObservedVM(
        backend=vm.backend,
        name=vm.name,
        identity=identity or vm.name,
        ownership=Ownership.MANAGED,
        power=vm.state,
        cpus=vm.cpus,
        memory=vm.memory,
        disk=vm.disk,
        protect=vm.protect,
        ports=tuple((p.guest, p.host) for p in vm.ports) if vm.backend_type == "lima" else None,
        marker=Marker(
            project=vm.project,
            name=vm.name,
            identity=identity or vm.name,
            fingerprint=vm.fingerprint,
            guest_fingerprint=vm.guest_fingerprint,
            image=vm.image,
        ),
        deep=True,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def converged(state: DesiredState) -> dict[str, Observation]:
    out: dict[str, list[ObservedVM]] = {"pve": [], "laptop": []}
    for i, vm in enumerate(state.vms):
        out[vm.backend].append(observed_from(vm, str(100 + i) if vm.backend == "pve" else ""))
    return {name: Observation(name, tuple(vms)) for name, vms in out.items()}


def stale_marker(vm: ObservedVM, **marker_changes: str) -> ObservedVM:
    assert vm.marker is not None
    return replace(vm, marker=replace(vm.marker, fingerprint="old", **marker_changes))
