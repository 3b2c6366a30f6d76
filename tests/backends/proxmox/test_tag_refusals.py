"""Preflight's tag verdict (rule P4) without Sys.Audit on /: inferred from the
``allowed-tags`` /cluster/options gives, which names the tags VMs hold at that moment,
against the tags of a listing read earlier. A tag gone in between (a lease released, a
VM another applier deleted) is not a tag the token may not set."""

from __future__ import annotations

from sand.backends.protocol import PreflightItem
from sand.backends.proxmox import refusals
from sand.backends.proxmox.backend import ProxmoxBackend
from tests.fakepve_rig.rig import FakePveRig


def row(vmid: int, name: str, tags: str) -> dict[str, object]:
    return {"vmid": vmid, "type": "qemu", "node": "pve1", "name": name, "tags": tags}


async def test_a_tag_gone_since_the_listing_blocks_nothing(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    rig.set_user_tag_access("free")
    item = PreflightItem(rig.desired([{"name": "dev"}])[0], "create")
    listed = [row(777, "released", "sand-lease-held")]  # gone from PVE since the listing
    rig.clear_log()
    problems, _ = await refusals.write_refusals(backend.ctx, [item], listed)
    assert problems == []
    # The listing was asked again once, to tell the stale tag from a refused one.
    assert rig.count("GET", "/cluster/resources") == 1


async def test_a_tag_there_before_and_after_still_blocks_under_list(
    rig: FakePveRig, backend: ProxmoxBackend
) -> None:
    rig.set_user_tag_access("list")
    rig.seed_vm(778, "kept", tags="team-tag")
    item = PreflightItem(rig.desired([{"name": "dev"}])[0], "create")
    listed = [row(778, "kept", "team-tag"), row(777, "released", "sand-lease-held")]
    problems, _ = await refusals.write_refusals(backend.ctx, [item], listed)
    assert [p.field for p in problems] == ["token_file"]
    assert "user-tag-access" in problems[0].message
