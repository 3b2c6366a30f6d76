"""Every call sand makes is served under the permissions PVE declares for its method
(tests/fakepve_rig/permissions.py, enforced by the rig per profile): a representative
set of runs on each profile, and its request log read back as (method, path template).

A call whose method has no rule fails here: its declaration is then to be read in the
sources and added, so the rig never serves sand a call PVE would check differently."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cli.helpers import Sand
from tests.fakepve_rig.calls import template_of
from tests.fakepve_rig.permissions import RULES
from tests.fakepve_rig.rig import FakePveRig

SOURCE = {"name": "agent-1", "memory": "1GiB"}
OTHER_TEMPLATE = 9001
WARM = {"agents": {"warm": 1}}


def calls(rig: FakePveRig) -> set[tuple[str, str | None, str]]:
    """(method, template, a path as sent) of each request sand's token made."""
    return {
        (r.method, template_of(r.method, r.path), r.path)
        for r in rig.log
        if r.token == rig.token_id
    }


def runs(sand: Sand, rig: FakePveRig) -> None:
    """create, update, replace, fork, claim, sleep/wake, template build, destroy, status,
    doctor: each must succeed (a refusal would hide the calls after it)."""

    def ok(*argv: str) -> None:
        proc = sand.run(*argv)
        assert proc.returncode == 0, f"{argv}: {proc.stdout}{proc.stderr}"

    def apply(vms: list[dict[str, Any]], **manifest: Any) -> None:
        data = rig.manifest(vms, defaults={"disk": "8GiB"})
        data.update(manifest)
        sand.write(data)
        ok("apply", "--auto-approve", "--allow-data-loss")

    sand.run("doctor")  # its verdict is not the point: its calls are
    apply([SOURCE])  # create
    apply([{**SOURCE, "memory": "2GiB", "disk": "10GiB"}])  # update: config, resize
    apply([{**SOURCE, "memory": "2GiB", "disk": "10GiB", "image": "debian-13-next"}])
    apply([SOURCE])  # replaced back
    apply([SOURCE, {"name": "try-1", "from": {"vm": "agent-1"}}])  # a fork
    apply([SOURCE], pools=WARM)  # a spare
    apply([SOURCE, {"name": "agent-4", "pool": "agents"}], pools=WARM)  # claims it
    # egress: the firewall written at create, rewritten in place, turned off (P16)
    walled = {"name": "walled", "egress": {"cidrs": ["10.20.0.0/16"]}}
    kept = [SOURCE, {"name": "agent-4", "pool": "agents"}]
    apply([*kept, walled], pools=WARM)
    changed = {"cidrs": ["192.0.2.0/24"], "ports": [22]}
    apply([*kept, {**walled, "egress": changed}], pools=WARM)
    apply([*kept, {"name": "walled"}], pools=WARM)
    ok("sleep", "agent-1")
    ok("wake", "agent-1")
    ok("status", "--deep")
    ok("template", "build", "--name", "debian-13-sand")
    ok("destroy", "--auto-approve", "--allow-data-loss")


@pytest.mark.parametrize("major", [8, 9])
def test_every_call_sand_makes_has_the_permission_rule_of_its_method(
    tmp_path, fakepve_factory, major
):
    rig = fakepve_factory(pve_version=major)
    rig.seed_vm(
        OTHER_TEMPLATE, "debian-13-next", template=True, status="stopped", disk=4 << 30,
        memory_mib=1024, cores=1, tags="golden",
    )  # fmt: skip
    rig.allow_image_import()
    rig.grant_template_build(rig.token_id)  # Sys.Audit on / among them: the datacenter read
    rig.run(lambda: rig.pve.firewall_config("cluster")["options"].__setitem__("enable", 1))
    runs(Sand(tmp_path), rig)
    made = calls(rig)
    unknown = sorted(path for method, template, path in made if template is None)
    assert unknown == [], "paths PVE has not"
    unruled = sorted({(m, t) for m, t, _ in made if (m, t) not in RULES}, key=str)
    assert unruled == [], "calls served without a permission rule"
    # The runs reach what they are said to (so the list above is not vacuous).
    methods = {(m, t) for m, t, _ in made}
    for expected in (
        ("POST", "/nodes/{node}/qemu/{vmid}/clone"),
        ("PUT", "/nodes/{node}/qemu/{vmid}/resize"),
        ("POST", "/nodes/{node}/qemu/{vmid}/snapshot"),
        ("POST", "/nodes/{node}/qemu/{vmid}/status/suspend"),
        ("POST", "/nodes/{node}/storage/{storage}/download-url"),
        ("POST", "/nodes/{node}/qemu/{vmid}/template"),
        ("DELETE", "/nodes/{node}/qemu/{vmid}"),
        ("GET", "/nodes/{node}/qemu/{vmid}/agent/network-get-interfaces"),
        ("GET", "/access/permissions"),
        ("GET", "/cluster/firewall/options"),
        ("PUT", "/nodes/{node}/qemu/{vmid}/firewall/options"),
        ("POST", "/nodes/{node}/qemu/{vmid}/firewall/ipset"),
        ("POST", "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}"),
        ("POST", "/nodes/{node}/qemu/{vmid}/firewall/rules"),
        ("GET", "/nodes/{node}/qemu/{vmid}/firewall/rules"),
        ("DELETE", "/nodes/{node}/qemu/{vmid}/firewall/rules/{pos}"),
        ("DELETE", "/nodes/{node}/qemu/{vmid}/firewall/ipset/{name}"),
    ):
        assert expected in methods, expected
