"""The guest's CPU type on Proxmox, end to end against fakepve: ``host`` on create, another
type planned as an update that restarts the VM, a VM without one (made by an older sand)
brought to ``host``, and a no-op plan that still reads nothing but the listing.

Assertions read fakepve's VM config and request log.
"""

from __future__ import annotations

import pytest

from tests.cli.helpers import Sand


@pytest.fixture
def sand(tmp_path, fakepve_server):
    s = Sand(tmp_path)
    s.write(fakepve_server.manifest([{"name": "web-1"}, {"name": "web-2"}]))
    return s


def cpu_types(rig) -> dict[str, str | None]:
    return {vm.name: vm.config.get("cpu") for vm in rig.vms()}


def test_apply_gives_every_guest_cpu_host_and_the_noop_plan_reads_only_the_listing(
    sand, fakepve_server
):
    rig = fakepve_server
    assert "cpu" not in rig.vm(rig.template_vmid).config  # the template runs PVE's kvm64
    proc = sand.run("plan")
    assert [line.split() for line in proc.stdout.splitlines()].count(
        ["+", "cpu", "=", '"host"']
    ) == 2, proc.stdout
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cpu_types(rig) == {"web-1": "host", "web-2": "host"}
    assert "cpu" not in rig.vm(rig.template_vmid).config  # the template is not touched

    rig.clear_log()
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rig.count("GET", "/cluster/resources") == 1
    assert len(rig.log) == 1  # the CPU type costs no request per VM
    assert rig.count(contains="/config") == rig.count(contains="/pending") == 0


def test_another_cpu_type_is_an_update_with_restart_and_apply_sets_it(sand, fakepve_server):
    rig = fakepve_server
    assert sand.run("apply", "--auto-approve").returncode == 0
    before = {vm.name: vm.vmid for vm in rig.vms()}
    sand.write(rig.manifest([{"name": "web-1", "cpu": "x86-64-v2-AES"}, {"name": "web-2"}]))

    proc = sand.run("plan")
    assert "web-1 (pve, " in proc.stdout
    assert "will be updated in place (requires restart)" in proc.stdout
    assert '~ cpu = "host" -> "x86-64-v2-AES" # requires restart' in proc.stdout
    assert "Plan: 0 to add, 1 to change, 0 to destroy." in proc.stdout
    plan = sand.plan_json()
    change = {c["vm"]: c for c in plan["changes"]}["web-1"]
    assert change["action"] == "update" and change["requires_restart"] is True
    assert [f["field"] for f in change["fields"]] == ["cpu"]

    rig.clear_log()
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert cpu_types(rig) == {"web-1": "x86-64-v2-AES", "web-2": "host"}
    assert {vm.name: vm.vmid for vm in rig.vms()} == before  # the same machines
    web1 = rig.vm(before["web-1"])
    assert web1.status == "running" and not web1.pending  # restarted, nothing left pending
    path = f"/nodes/{rig.nodes[0]}/qemu/{before['web-1']}"
    assert rig.count("POST", f"{path}/status/shutdown") == 1
    assert rig.count("POST", f"{path}/status/start") == 1
    assert sand.run("plan", "--detailed-exitcode").returncode == 0


def test_the_backend_cpu_applies_to_vms_that_name_none(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "web-1"}, {"name": "web-2", "cpu": "host"}], cpu="EPYC"))
    assert sand.run("apply", "--auto-approve").returncode == 0
    assert cpu_types(rig) == {"web-1": "EPYC", "web-2": "host"}


def test_a_vm_an_older_sand_made_without_a_cpu_type_is_brought_to_host(sand, fakepve_server):
    rig = fakepve_server
    from tests.backends.proxmox.helpers import state_of

    vm = state_of(rig, [{"name": "web-1"}]).vms[0]
    # Its fingerprint is not today's (the CPU type was not in it), and its config names no
    # CPU type: what a sand before this one left behind.
    rig.seed_managed(vm, 100, fingerprint="0123456789abcdef")
    rig.run(lambda: rig.pve.vm(100).config.pop("cpu"))
    sand.write(rig.manifest([{"name": "web-1"}]))

    proc = sand.run("plan")
    assert '~ cpu = "kvm64" -> "host" # requires restart' in proc.stdout, proc.stdout
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rig.vm(100).config.get("cpu") == "host"
    rig.clear_log()
    assert sand.run("plan", "--detailed-exitcode").returncode == 0
    assert rig.count(contains="/config") == rig.count(contains="/pending") == 0


def test_a_bad_cpu_type_is_refused_before_any_request(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "web-1", "cpu": "x86-64-v2-aes"}]))
    rig.clear_log()
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 1
    assert "sand.yaml:" in proc.stderr and "'x86-64-v2-AES'" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert rig.log == []
