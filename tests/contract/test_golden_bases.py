"""The Backend contract's golden-base rule (``sand/backends/protocol.py``, rule 6), for
every backend kind: fakepve, the limactl stand-in locally, and on a remote host.

A base is provisioned by the caller (here a recorder standing in for
``sand.provision.provision_base``: what is checked is the backend's side of the
build), frozen, and only then ready; VMs are cloned only from a ready base and record
it; a base is deleted only when no VM was made from it, and never one that is not
sand's. Everything asserted is read from the far side or a fresh observation.
"""

from __future__ import annotations

from typing import Any

import pytest

from sand.desired.spec import DesiredBase
from sand.errors import SandError
from sand.guest.endpoint import GuestEndpoint
from sand.observed import ObservedBase, Ownership
from sand.state.journal import Journal
from tests.contract.conftest import MakeBackend
from tests.contract.rigs import ContractRig

IMAGES = {"wb": {"packages": ["jq"], "agents": ["claude"]}}


class Recorder:
    """Takes the build machine's endpoint as provisioning would; fails when told to."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, GuestEndpoint]] = []
        self.fail = fail

    async def __call__(self, base: DesiredBase, endpoint: GuestEndpoint) -> None:
        self.calls.append((base.fingerprint, endpoint))
        if self.fail:
            raise SandError("provisioning the base failed (as the test asked)")


def golden(far: ContractRig, names: list[str]) -> Any:
    vms = [{"name": n, "image": "wb"} for n in names]
    return far.state(vms, images=IMAGES)


async def test_golden_bases_are_ready_only_once_built_and_vms_clone_from_them(
    far: ContractRig, backend_of: MakeBackend, journal: Journal
) -> None:
    state = golden(far, ["vm1"])
    (vm,) = state.vms
    assert vm.base is not None
    backend = backend_of()
    await backend.observe(state.vms)
    provision = Recorder()
    with far.answer_agents():
        built = await backend.build_base(vm.base, provision, journal)
    assert built.ready and built.fingerprint == vm.base.fingerprint
    assert [fp for fp, _ in provision.calls] == [vm.base.fingerprint]
    assert provision.calls[0][1].user == vm.base.user
    assert journal.pending() == []
    assert far.bases() == {built.identity: True}

    # A fresh run lists it ready, with nothing made from it yet.
    seen = await backend_of().observe(state.vms)
    assert [(b.identity, b.fingerprint, b.ready, b.made) for b in seen.bases] == [
        (built.identity, vm.base.fingerprint, True, ())
    ]
    assert built.identity not in {v.identity for v in seen.vms}  # a base is never a VM

    made = await backend.create(vm, journal, from_base=True)
    assert made.ownership is Ownership.MANAGED
    # Converged (the marker written again): it still says which base it was made from.
    await backend.mark_converged(vm, made)
    later = await backend_of().observe(state.vms)
    (ours,) = later.managed()
    assert ours.marker is not None and ours.marker.base == vm.base.fingerprint
    assert [b.made for b in later.bases] == [(vm.name,)]

    # Made from: kept, saying why, and left as it is.
    before = far.snapshot()
    (listed,) = later.bases
    assert (await backend.delete_base(listed, journal)).startswith("kept:")
    assert far.snapshot() == before
    await backend.delete(ours, journal)
    assert await backend.delete_base(listed, journal) == "deleted"
    assert far.bases() == {}
    assert (await backend_of().observe(state.vms)).bases == ()


async def test_golden_bases_a_failed_build_leaves_nothing_to_clone_from(
    far: ContractRig, backend_of: MakeBackend, journal: Journal
) -> None:
    state = golden(far, ["vm1"])
    (vm,) = state.vms
    assert vm.base is not None
    backend = backend_of()
    await backend.observe(state.vms)
    with far.answer_agents(), pytest.raises(SandError, match="as the test asked"):
        await backend.build_base(vm.base, Recorder(fail=True), journal)
    assert not any(far.bases().values())  # nothing ready (removed, or never frozen)
    seen = await backend_of().observe(state.vms)
    assert not [b for b in seen.bases if b.ready]
    with pytest.raises(SandError, match="not ready"):
        await backend.create(vm, journal, from_base=True)
    assert far.names() == []


async def test_golden_bases_never_delete_one_sand_did_not_make(
    far: ContractRig, backend_of: MakeBackend, journal: Journal
) -> None:
    # A person's VM of a name the manifest has: listed (unmanaged), never sand's.
    state = far.state([{"name": "not-a-base"}])
    backend = backend_of()
    await backend.observe(state.vms)
    far.plant_unmanaged("not-a-base")
    seen = await backend_of().observe(state.vms)
    (theirs,) = [v for v in seen.vms if v.name == "not-a-base"]
    before = far.snapshot()
    pretend = ObservedBase(theirs.backend, "wb", theirs.identity, "0" * 16, True)
    with pytest.raises(SandError, match="refusing"):
        await backend.delete_base(pretend, journal)
    assert far.snapshot() == before
