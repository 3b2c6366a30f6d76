"""``--target``, ``--replace`` and ``sand reset`` through the real command line, against
fakepve: what PVE holds afterwards is what is checked.

These VMs have no guest behind them, so the unpushed-work guard cannot sweep them;
deletes and replacements pass ``--allow-data-loss`` (the guard has tests of its own,
and the e2e suite runs reset on real guests).
"""

from __future__ import annotations

import json

import pytest

from tests.cli.helpers import Sand

GO = ("apply", "--auto-approve")
MUTATING = ("POST", "PUT", "DELETE")


@pytest.fixture
def sand(tmp_path) -> Sand:
    return Sand(tmp_path)


def memory_mib(rig, name: str) -> int:
    (vm,) = rig.vms_named(name)
    return int(vm.config["memory"])


def changes(plan: dict) -> dict[str, dict]:
    return {c["vm"]: c for c in plan["changes"]}


def mutations(rig) -> list[str]:
    return [f"{r.method} {r.path}" for r in rig.log if r.method in MUTATING]


def test_target_applies_only_the_named_vm(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}, {"name": "b", "memory": "1GiB"}]))
    assert sand.run(*GO).returncode == 0
    sand.write(rig.manifest([{"name": "a", "memory": "2GiB"}, {"name": "b", "memory": "2GiB"}]))

    text = sand.run("plan", "--target", "a")
    assert text.returncode == 0, text.stdout + text.stderr
    assert "Warning: Resource targeting is in effect: only a is planned" in text.stdout
    assert "# a (pve" in text.stdout and "# b (pve" not in text.stdout
    assert "Plan: 0 to add, 1 to change, 0 to destroy." in text.stdout
    plan = sand.plan_json("--target", "a")
    assert plan["targets"] == ["a"]
    by = changes(plan)
    assert by["a"]["action"] == "update"
    assert by["b"]["action"] == "no-op" and by["b"]["fields"] == []
    assert by["b"]["reasons"] == ["not targeted: left as it is"]

    done = sand.run(*GO, "--target", "a")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Applied changes may be incomplete" in done.stderr
    assert memory_mib(rig, "a") == 2048 and memory_mib(rig, "b") == 1024
    # b's change is still pending, as the full plan shows.
    assert {k: v["action"] for k, v in changes(sand.plan_json()).items()} == {
        "a": "no-op",
        "b": "update",
    }


def test_the_mass_delete_guard_counts_the_whole_fleet(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": n, "memory": "1GiB"} for n in ("a", "b", "c")]))
    assert sand.run(*GO).returncode == 0
    sand.write(rig.manifest([{"name": "c", "memory": "1GiB"}]))
    drop = ("--allow-data-loss",)

    # One delete of three managed VMs is not a mass delete (alone it would be all of them).
    one = sand.run(*GO, *drop, "--target", "a")
    assert one.returncode == 0, one.stdout + one.stderr
    assert sorted(v.name for v in rig.vms()) == ["b", "c"]

    sand.write(rig.manifest([{"name": "c", "memory": "1GiB"}, {"name": "d", "memory": "1GiB"}]))
    assert sand.run(*GO, "--target", "d").returncode == 0
    sand.write(rig.manifest([{"name": "d", "memory": "1GiB"}]))
    # b and c of b, c, d: more than half of the fleet, targeted or not.
    rig.clear_log()
    many = sand.run(*GO, *drop, "--target", "b", "--target", "c")
    assert many.returncode == 1 and "--allow-mass-delete" in many.stderr, many.stderr
    assert mutations(rig) == []
    assert sorted(v.name for v in rig.vms()) == ["b", "c", "d"]


def test_an_unknown_target_is_an_error_and_nothing_changes(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    rig.clear_log()
    for verb in (("plan",), GO):
        res = sand.run(*verb, "--target", "a", "--target", "nope")
        assert res.returncode == 1, res.stdout + res.stderr
        assert "--target 'nope': no VM of that name in the manifest" in res.stderr
        assert "Traceback" not in res.stderr
    assert mutations(rig) == [] and rig.vms() == []


def test_a_saved_targeted_plan_applies_as_targeted(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}, {"name": "b", "memory": "1GiB"}]))
    saved = sand.workdir / "a.plan"
    made = sand.run("plan", "--target", "a", "--out", str(saved))
    assert made.returncode == 0, made.stdout + made.stderr
    assert json.loads(saved.read_text())["plan"]["targets"] == ["a"]
    done = sand.run("apply", str(saved))
    assert done.returncode == 0, done.stdout + done.stderr
    assert [v.name for v in rig.vms()] == ["a"]
    mixed = sand.run("apply", str(saved), "--target", "b")
    assert mixed.returncode == 1 and "carries its own --target" in mixed.stderr


def test_replace_makes_a_new_vm_of_the_same_name(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}, {"name": "b", "memory": "1GiB"}]))
    assert sand.run(*GO).returncode == 0
    (old,) = rig.vms_named("a")
    (other,) = rig.vms_named("b")
    plan = sand.plan_json("--replace", "a", "--allow-data-loss")
    by = changes(plan)
    assert by["a"]["action"] == "replace" and by["a"]["strategy"] == "create-before-destroy"
    assert by["a"]["reasons"] == ["replacement requested with --replace"]
    assert by["b"]["action"] == "no-op" and plan["replace"] == ["a"]
    assert plan["summary"] == {
        "add": 1,
        "finish": 0,
        "change": 0,
        "destroy": 1,
        "has_changes": True,
    }

    done = sand.run(*GO, "--replace", "a", "--allow-data-loss")
    assert done.returncode == 0, done.stdout + done.stderr
    (new,) = rig.vms_named("a")
    assert new.vmid != old.vmid and rig.vm(old.vmid) is None
    assert [v.vmid for v in rig.vms_named("b")] == [other.vmid]
    assert sand.run("plan", "--detailed-exitcode").returncode == 0


def test_replace_is_refused_for_a_protected_vm(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB", "protect": True}]))
    assert sand.run(*GO).returncode == 0
    (before,) = rig.vms()
    plan = sand.run("plan", "--replace", "a")
    assert plan.returncode == 1
    assert "must be replaced but is protected" in plan.stdout, plan.stdout
    assert sand.run(*GO, "--replace", "a", "--allow-data-loss").returncode == 1
    assert [v.vmid for v in rig.vms()] == [before.vmid]


def test_replace_of_a_vm_not_made_yet_creates_it(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    assert changes(sand.plan_json("--replace", "a"))["a"]["action"] == "create"
    assert sand.run(*GO, "--replace", "a").returncode == 0
    assert [v.name for v in rig.vms()] == ["a"]


def test_replace_names_a_vm_of_the_manifest(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    rig.clear_log()
    res = sand.run(*GO, "--replace", "nope")
    assert res.returncode == 1 and "--replace 'nope': not a VM of the manifest" in res.stderr
    assert mutations(rig) == [] and rig.vms() == []


def test_reset_is_replace_and_target_of_one_vm(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}, {"name": "b", "memory": "1GiB"}]))
    assert sand.run(*GO).returncode == 0
    (old,) = rig.vms_named("a")
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}, {"name": "b", "memory": "2GiB"}]))
    unattended = sand.run("reset", "a")
    assert unattended.returncode == 1 and "no terminal to confirm on" in unattended.stderr
    done = sand.run("reset", "a", "-f", "sand.yaml", "--auto-approve", "--allow-data-loss")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "replacement requested with --replace" in done.stdout
    assert "Resource targeting is in effect" in done.stdout
    (new,) = rig.vms_named("a")
    assert new.vmid != old.vmid and rig.vm(old.vmid) is None
    assert memory_mib(rig, "b") == 1024  # b's own change was not made
    missing = sand.run("reset", "nope", "--auto-approve")
    assert missing.returncode == 1 and "not a VM of the manifest" in missing.stderr


def test_watch_takes_no_target(sand, fakepve_server):
    sand.write(fakepve_server.manifest([{"name": "a"}]))
    res = sand.run("apply", "--watch", "--target", "a")
    assert res.returncode == 1 and "never with --watch" in res.stderr
