"""The secrets stamp on a PVE VM: a tag the one listing carries, kept across marks,
and the listing's uptime telling when the guest last booted."""

from __future__ import annotations

import time

from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.backend import ProxmoxBackend
from sand.observed import SecretsRecord
from sand.state.journal import Journal
from tests.backends.proxmox.helpers import managed
from tests.fakepve_rig.rig import FakePveRig

STAMP = "1-" + "0123456789abcdef0123"
ROTATED = "1-" + "fedcba9876543210fedc"


def tags_of(rig: FakePveRig, vmid: int) -> list[str]:
    vm = rig.vm(vmid)
    assert vm is not None
    return mk.split_tags(vm.config.get("tags"))


async def test_the_stamp_is_a_listing_tag_read_back_with_no_extra_request(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    desired = rig.desired([{"name": "dev-1"}, {"name": "dev-2"}])
    for vm in desired:
        made = await backend.create(vm, journal)
        secrets = SecretsRecord(STAMP, 1_700_000_000) if vm.name == "dev-1" else None
        await backend.mark_converged(vm, made, secrets)
    dev1 = rig.vms_named("dev-1")[0]
    assert f"sand-secrets-{STAMP}-1700000000" in tags_of(rig, dev1.vmid)
    assert not any(
        t.startswith("sand-secrets-") for t in tags_of(rig, rig.vms_named("dev-2")[0].vmid)
    )
    rig.clear_log()

    obs = await backend.observe(desired)

    assert [str(r) for r in rig.log] == ["GET /cluster/resources?type=vm -> 200"]
    seen = managed(obs.vms)
    assert not seen["dev-1"].deep  # the fast path carries the stamp too
    assert seen["dev-1"].marker is not None
    assert (seen["dev-1"].marker.secrets, seen["dev-1"].marker.secrets_at) == (
        STAMP,
        1_700_000_000,
    )
    assert seen["dev-2"].marker is not None and seen["dev-2"].marker.secrets == ""


async def test_marking_without_a_delivery_keeps_the_stamp_and_operator_tags(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    (vm,) = rig.desired([{"name": "dev-1"}])
    made = await backend.create(vm, journal)
    await backend.mark_converged(vm, made, SecretsRecord(STAMP, 1_700_000_000))
    node = made.node
    await backend.ctx.client.put(
        f"nodes/{node}/qemu/{made.identity}/config",
        tags=";".join([*tags_of(rig, int(made.identity)), "team-a"]),
    )

    await backend.mark_converged(vm, made)  # e.g. an in-place update, nothing delivered
    assert f"sand-secrets-{STAMP}-1700000000" in tags_of(rig, int(made.identity))
    assert "team-a" in tags_of(rig, int(made.identity))

    await backend.mark_converged(vm, made, SecretsRecord(ROTATED, 1_700_000_500))
    stamps = [t for t in tags_of(rig, int(made.identity)) if t.startswith("sand-secrets-")]
    assert stamps == [f"sand-secrets-{ROTATED}-1700000500"]  # replaced, never accumulated

    await backend.mark_converged(vm, made, SecretsRecord("", 1_700_000_900))  # no secrets now
    assert not [t for t in tags_of(rig, int(made.identity)) if t.startswith("sand-secrets-")]
    assert "team-a" in tags_of(rig, int(made.identity))


async def test_a_deep_read_carries_the_stamp_too(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    (vm,) = rig.desired([{"name": "dev-1"}])
    made = await backend.create(vm, journal)
    await backend.mark_converged(vm, made, SecretsRecord(STAMP, 1_700_000_000))
    (bigger,) = rig.desired([{"name": "dev-1", "cpus": 4}])  # another fingerprint: deep read
    obs = await backend.observe([bigger])
    seen = managed(obs.vms)["dev-1"]
    assert seen.deep
    assert seen.marker is not None and seen.marker.secrets == STAMP


async def test_the_listing_uptime_says_when_the_guest_booted(
    rig: FakePveRig, backend: ProxmoxBackend, journal: Journal
) -> None:
    desired = rig.desired([{"name": "dev-1"}, {"name": "dev-2", "state": "stopped"}])
    for vm in desired:
        made = await backend.create(vm, journal)  # creates boot; the engine stops after
        if vm.state == "stopped":
            made = await backend.update(vm, made, ["state"], journal)
        await backend.mark_converged(vm, made)
    dev1 = rig.vms_named("dev-1")[0]
    rig.set_uptime(dev1.vmid, 3600)
    seen = managed((await backend.observe(desired)).vms)
    booted = seen["dev-1"].booted_at
    assert booted is not None and abs(booted - (time.time() - 3600)) < 5
    assert seen["dev-2"].booted_at is None  # stopped: it holds nothing on tmpfs

    rig.reboot(dev1.vmid)  # behind sand's back
    rig.clear_log()
    seen = managed((await backend.observe(desired)).vms)
    booted = seen["dev-1"].booted_at
    assert booted is not None and abs(booted - time.time()) < 5
    assert rig.count() == 1
