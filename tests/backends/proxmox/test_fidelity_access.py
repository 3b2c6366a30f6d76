"""The fidelity layer's access rules (tests/fakepve_rig/fields.py): what a token sees.

Raw HTTP against the rig, so each rule is seen without sand in between; sand meeting
them is in tests/cli/test_pool_audit_proxmox.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.backends.proxmox.test_fidelity import Api
from tests.fakepve_rig.permissions import CONFIG_PRIVS
from tests.fakepve_rig.rig import FakePveRig

BOTH = pytest.mark.parametrize("major", [8, 9])


def without(rig: FakePveRig, *privs: str) -> None:
    rig.run(lambda: rig.pve.acl.__setitem__(rig.token_id, []))
    rig.run(rig.grant_sand_privileges, rig.token_id, without=privs)


@BOTH
def test_the_listing_shows_a_vms_pool_only_with_pool_audit(fakepve_factory: Any, major: int):
    rig = fakepve_factory(pve_version=major)
    api = Api(rig)
    status, rows = api.call("GET", "cluster/resources", type="vm")
    assert status == 200 and [(r["vmid"], r.get("pool")) for r in rows] == [(9000, "sand")]
    assert api.call("GET", "cluster/resources", type="pool")[1] == [
        {"id": "/pool/sand", "pool": "sand", "type": "pool"}
    ]
    without(rig, "Pool.Audit")
    rows = api.call("GET", "cluster/resources", type="vm")[1]
    assert [(r["vmid"], "pool" in r) for r in rows] == [(9000, False)]
    assert api.call("GET", "cluster/resources", type="pool")[1] == []


@BOTH
def test_node_usage_shows_only_with_sys_audit_on_the_node(fakepve_factory: Any, major: int):
    rig = fakepve_factory(pve_version=major, nodes=("pve1", "pve2"))
    rig.grant(rig.token_id, "/nodes/pve2", "Sys.Audit")
    api = Api(rig)
    for path, query in (("nodes", {}), ("cluster/resources", {"type": "node"})):
        rows = {r["node"]: r for r in api.call("GET", path, **query)[1]}
        assert "maxmem" not in rows["pve1"] and "mem" not in rows["pve1"], path
        assert rows["pve1"]["status"] == "online"
        assert rows["pve2"]["maxmem"] > 0, path


@BOTH
def test_a_config_write_is_checked_against_its_declaration_first(fakepve_factory: Any, major):
    """update_vm declares any VM.Config.* on the VM, checked before the keys are: a
    write with no key to check (a digest alone) is refused without one."""
    rig = fakepve_factory(pve_version=major)
    rig.seed_vm(100, "a", status="stopped")
    without(rig, *CONFIG_PRIVS)
    api = Api(rig)
    digest = api.call("GET", "nodes/pve1/qemu/100/config")[1]["digest"]
    status, message = api.call("PUT", "nodes/pve1/qemu/100/config", digest=digest)
    assert status == 403
    assert message.strip() == f"Permission check failed (/vms/100, {'|'.join(CONFIG_PRIVS)})"


@BOTH
def test_a_resize_needs_space_on_the_disks_storage(fakepve_factory: Any, major: int) -> None:
    rig = fakepve_factory(pve_version=major)
    rig.seed_vm(100, "a", status="stopped")
    without(rig, "Datastore.AllocateSpace")
    status, message = Api(rig).call("PUT", "nodes/pve1/qemu/100/resize", disk="scsi0", size="+1G")
    assert status == 403
    assert (
        message.strip() == "Permission check failed (/storage/local-lvm, Datastore.AllocateSpace)"
    )


@BOTH
def test_a_bridge_is_listed_only_with_sdn_access_to_it(fakepve_factory: Any, major: int) -> None:
    rig = fakepve_factory(pve_version=major)
    api = Api(rig)
    names = lambda: [i["iface"] for i in api.call("GET", "nodes/pve1/network")[1]]  # noqa: E731
    assert "vmbr0" in names()
    without(rig, "SDN.Use")
    assert "vmbr0" not in names() and "eno1" in names()
