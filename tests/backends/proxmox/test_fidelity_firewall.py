"""The fidelity layer serves a VM's firewall (what egress will be enforced with,
docs/egress.md) under the permissions pve-firewall declares, on 8 and 9 (P16): raw HTTP
against the rig, so each rule is seen without sand in between."""

from __future__ import annotations

from typing import Any

import pytest

from tests.backends.proxmox.test_fidelity import Api
from tests.backends.proxmox.test_fidelity_access import without
from tests.fakepve_rig.rig import FakePveRig

BOTH = pytest.mark.parametrize("major", [8, 9])
FW = "nodes/pve1/qemu/100/firewall"


def stored(rig: FakePveRig) -> dict[str, Any]:
    conf: dict[str, Any] = rig.run(rig.pve.firewall_config, "vm", "pve1", 100)
    return conf


def answer(api: Api, method: str, path: str, **data: Any) -> tuple[int, Any]:
    """The status and the data, or the message without its line end (as PVE ends it)."""
    status, body = api.call(method, path, **data)
    return status, body.strip() if isinstance(body, str) else body


def made(fakepve_factory: Any, major: int) -> tuple[FakePveRig, Api]:
    rig: FakePveRig = fakepve_factory(pve_version=major)
    rig.seed_vm(100, "a", status="stopped")
    return rig, Api(rig)


@BOTH
def test_sands_token_writes_a_vms_firewall_options_ipset_and_rules(fakepve_factory, major):
    rig, api = made(fakepve_factory, major)
    assert api.call("PUT", f"{FW}/options", enable=1, policy_out="DROP", log_level_out="info")[0]
    assert api.call("POST", f"{FW}/ipset", name="sand-egress")[0] == 200
    assert api.call("POST", f"{FW}/ipset/sand-egress", cidr="10.20.0.0/16")[0] == 200
    status, _ = api.call(
        "POST", f"{FW}/rules", type="out", action="ACCEPT", dest="+sand-egress",
        proto="tcp", dport="443,22", enable=1,
    )  # fmt: skip
    assert status == 200
    options = api.call("GET", f"{FW}/options")[1]
    assert (options["enable"], options["policy_out"]) == (1, "DROP")
    (rule,) = api.call("GET", f"{FW}/rules")[1]
    assert (rule["type"], rule["dest"], rule["dport"], rule["enable"]) == (
        "out", "+sand-egress", "443,22", 1,
    )  # fmt: skip
    conf = stored(rig)
    assert conf["options"]["policy_out"] == "DROP"
    assert [e["cidr"] for e in conf["ipset"]["sand-egress"]] == ["10.20.0.0/16"]


@BOTH
def test_writing_a_vms_firewall_needs_vm_config_network(fakepve_factory, major):
    rig, api = made(fakepve_factory, major)
    without(rig, "VM.Config.Network")
    for method, path, data in (
        ("PUT", "options", {"enable": 1, "policy_out": "DROP"}),
        ("POST", "ipset", {"name": "sand-egress"}),
        ("POST", "rules", {"type": "out", "action": "ACCEPT", "enable": 1}),
    ):
        assert answer(api, method, f"{FW}/{path}", **data) == (
            403,
            "Permission check failed (/vms/100, VM.Config.Network)",
        )
    conf = stored(rig)
    assert (conf["options"], conf["rules"], conf["ipset"]) == ({}, [], {})
    assert api.call("GET", f"{FW}/options")[0] == 200  # reading takes VM.Audit only


@BOTH
def test_reading_a_vms_firewall_needs_vm_audit(fakepve_factory, major):
    rig, api = made(fakepve_factory, major)
    without(rig, "VM.Audit")
    for path in ("options", "rules", "ipset"):
        assert answer(api, "GET", f"{FW}/{path}") == (
            403, "Permission check failed (/vms/100, VM.Audit)",
        ), path  # fmt: skip


@BOTH
def test_the_datacenter_switch_is_out_of_a_pool_scoped_tokens_sight(fakepve_factory, major):
    """pve-firewall applies no VM rule while the datacenter's firewall is off, and only
    Sys.Audit on / reads whether it is on: sand's least-privilege token cannot tell."""
    rig: FakePveRig = fakepve_factory(pve_version=major)
    api = Api(rig)
    assert answer(api, "GET", "cluster/firewall/options") == (
        403, "Permission check failed (/, Sys.Audit)",
    )  # fmt: skip
    rig.grant(rig.token_id, "/", "Sys.Audit")
    status, options = api.call("GET", "cluster/firewall/options")
    assert status == 200 and not options.get("enable")


@BOTH
def test_a_rule_sent_without_enable_is_stored_disabled_and_first(fakepve_factory, major):
    """create_rule (Rules.pm): ``enable = 0 if !defined``, and ``unshift`` to the top: a
    writer must send enable=1, and rules land in reverse order unless given ``pos``."""
    _, api = made(fakepve_factory, major)
    api.call("POST", f"{FW}/rules", type="out", action="ACCEPT", dport="443", proto="tcp")
    api.call("POST", f"{FW}/rules", type="out", action="ACCEPT", dport="22", proto="tcp")
    rules = api.call("GET", f"{FW}/rules")[1]
    assert [(r["pos"], r["dport"], r.get("enable", 0)) for r in rules] == [
        (0, "22", 0),
        (1, "443", 0),
    ]


@BOTH
def test_each_firewall_read_has_a_digest_of_its_own_answer_only(fakepve_factory, major):
    """P17: no digest covers the whole ``<vmid>.fw`` (``copy_list_with_digest`` of the
    rules, ``copy_opject_with_digest`` of the options, in pve-firewall's Firewall.pm), so
    the rules' digest stays when the options or an ipset change: one read cannot show a
    hand's change to the others (sand reads each: docs/egress.md#drift)."""
    _, api = made(fakepve_factory, major)
    assert api.call("POST", f"{FW}/ipset", name="sand-egress")[0] == 200
    assert api.call("POST", f"{FW}/rules", type="out", action="ACCEPT", enable=1)[0] == 200

    def digests() -> tuple[str, str]:
        (rule,) = api.call("GET", f"{FW}/rules")[1]
        return rule["digest"], api.call("GET", f"{FW}/options")[1]["digest"]

    rules, options = digests()
    assert api.call("PUT", f"{FW}/options", enable=1, policy_out="ACCEPT")[0] == 200
    assert api.call("POST", f"{FW}/ipset/sand-egress", cidr="10.20.0.0/16")[0] == 200
    after_rules, after_options = digests()
    assert after_rules == rules
    assert after_options != options
