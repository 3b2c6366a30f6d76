"""A crash mid-build leaves no half base a VM could be cloned from (fakepve + real guests).

`sand apply` is SIGKILLed from outside the moment its journal reaches a step of the
base's build (``tests/crash/killer.py``): after the clone, after the start, after the
machine was provisioned, after its fingerprint tag was written (the conversion is
the next request). Each time, PVE is left with a base that is not a ready template
(or, only at the last point, one PVE finished converting on its own: complete, so
kept), no VM of the manifest was cloned, a plan plans a new build and the half
base's removal, and the next apply converges: the half base gone, one template, the
VMs cloned from it, and a no-op plan.
"""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import Sand
from tests.crash.killer import env_for, kill_when, sand_argv, step
from tests.provision.e2e_helpers import stand_in_agents
from tests.rig.clones import LayeredGuests, sand_block

pytestmark = pytest.mark.e2e

POINTS = {
    "after the clone": "cloned",
    "after the start": "started",
    "after provisioning": "provisioned",
    "after the fingerprint tag, before the conversion": "marked",
}


def _base_step(name: str):
    """The journal reached step ``name`` of a golden base's build."""

    def holds(records):
        bases = {
            r.get("id") for r in records if r.get("phase") == "intent" and r.get("op") == "base"
        }
        return any(r.get("id") in bases for r in records if step(name)([r]))

    return holds


@pytest.mark.parametrize("point", list(POINTS))
def test_a_build_killed_midway_is_never_cloned_from_and_the_next_apply_converges(
    point, tmp_path, fakepve_server, bare_rootfs, rig_rootfs, apt_mirror
):
    rig = fakepve_server
    public = rig.identity.with_name(rig.identity.name + ".pub").read_text().strip()
    sand = Sand(tmp_path)
    data = rig.manifest(
        [{"name": "a", "memory": "1GiB"}, {"name": "b", "memory": "1GiB"}],
        defaults={"provision": True, "timezone": "Etc/UTC", "image": "wb"},
    )
    data["images"] = {"wb": {"packages": ["tini"]}}
    sand.write(data)
    env = {**env_for(sand.state_dir), "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "ag"))}
    journal = sand.state_dir / "projects" / "demo" / "journal.jsonl"
    guests = LayeredGuests(
        rig, public_key=public, bare=bare_rootfs, workbench=rig_rootfs, mirror=apt_mirror,
        base_from_bare=False,
    )  # fmt: skip
    try:
        with guests:
            killed = kill_when(
                sand_argv("apply", "--auto-approve"),
                env,
                tmp_path,
                journal,
                _base_step(POINTS[point]),
                timeout=300,
            )
        assert killed, f"apply finished before reaching {point!r}"

        # What the kill left: a base that is not a ready template, and no VM cloned.
        halves = [
            vm
            for vm in [*rig.templates(), *rig.vms()]
            if sand_block(vm.config.get("description")).get("kind") == "golden"
        ]
        assert len(halves) == 1, halves
        half = halves[0]
        half_op = sand_block(half.config.get("description"))["op"]
        ready = half.template and "sand-golden-new" not in str(half.config.get("tags"))
        if ready:
            # Only after the fingerprint tag: PVE may have finished the conversion sand
            # asked for just before the kill (a task runs on without its client). Then the
            # base is complete, not half: recovery keeps it and the VMs are made from it.
            assert POINTS[point] == "marked", f"{point}: a half base is ready to clone from"
        else:
            assert rig.vms_named("a") == [] and rig.vms_named("b") == []
            plan = json.loads(sand.run("plan", "--json", env=env).stdout)
            assert [b["action"] for b in plan["bases"]] == ["build"]
            assert [d["action"] for d in plan["recovery"]] == ["delete"]
            assert "half-built golden base" in plan["recovery"][0]["summary"]
            assert all(c["base"] == plan["bases"][0]["fingerprint"] for c in plan["changes"])

        with guests:
            proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
        if not ready:  # the half base was removed (PVE may hand its vmid to the new build)
            now = rig.vm(half.vmid)
            assert now is None or sand_block(now.config.get("description")).get("op") != half_op
        (template,) = rig.templates()[1:]  # the seeded debian template, then the base
        fingerprint = sand_block(template.config["description"])["fingerprint"]
        for name in ("a", "b"):
            (vm,) = rig.vms_named(name)
            assert f"sand-from-{fingerprint}" in vm.config["tags"]
        again = sand.run("plan", "--detailed-exitcode", env=env)
        assert again.returncode == 0, again.stdout
    finally:
        guests.stop()
