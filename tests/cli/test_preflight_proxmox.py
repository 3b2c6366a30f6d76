"""Preflight on fakepve: a change PVE would refuse is blocked at plan time, located,
and apply touches nothing of that VM (the request log shows no write at all)."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.helpers import Sand

GIB = 1 << 30


def writes(rig) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in rig.log if r.method in ("POST", "PUT", "DELETE")]


def line_of(text: str, needle: str) -> int:
    """1-based line of the first line containing ``needle``."""
    return next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)


def located(out: str, manifest_text: str, needle: str) -> re.Match[str]:
    found = re.search(r"sand\.yaml:(\d+):(\d+): ", out)
    assert found, out
    assert int(found.group(1)) == line_of(manifest_text, needle), (out, manifest_text)
    return found


@pytest.fixture
def sand(tmp_path) -> Sand:
    return Sand(tmp_path)


def sees_node_memory(rig) -> None:
    """PVE shows a node's memory and CPUs only to a token with Sys.Audit on it
    (pve-manager PVE::API2::Nodes index): without it the size check cannot be made."""
    rig.grant(rig.token_id, f"/nodes/{rig.nodes[0]}", "Sys.Audit")


def test_a_typo_in_a_replacement_image_touches_nothing(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "agent-1", "memory": "2GiB"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    (before,) = rig.vms_named("agent-1")
    config = dict(before.config)
    sand.write(rig.manifest([{"name": "agent-1", "memory": "2GiB", "image": "other-tpl"}]))
    text = sand.manifest.read_text()

    plan = sand.run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert '! vm "agent-1"' in plan.stdout and "would be replaced" in plan.stdout
    assert "template 'other-tpl' not found" in plan.stdout
    located(plan.stdout, text, "other-tpl")

    rig.clear_log()
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 1, apply.stdout + apply.stderr
    assert writes(rig) == []  # not a clone, not a delete, not a config write
    (after,) = rig.vms_named("agent-1")
    assert after.vmid == before.vmid and after.config == config
    assert after.status == "running"


def test_a_create_with_an_unknown_template_is_blocked_at_the_backend_line(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a"}], template="debian-99"))
    text = sand.manifest.read_text()
    plan = sand.run("plan", "--json")
    assert plan.returncode == 1
    (change,) = json.loads(plan.stdout)["changes"]
    assert change["action"] == "blocked" and change["blocked_action"] == "create"
    (blocker,) = change["blockers"]
    assert "debian-99" in blocker["reason"] and blocker["kind"] == "preflight"
    row = line_of(text, "debian-99")
    column = text.splitlines()[row - 1].index("debian-99") + 1
    assert blocker["where"] == f"sand.yaml:{row}:{column}"
    rig.clear_log()
    assert sand.run("apply", "--auto-approve").returncode == 1
    assert writes(rig) == [] and rig.vms() == []


@pytest.mark.parametrize(
    ("vm", "overrides", "needle", "words"),
    [
        ({"name": "a", "memory": "16GiB"}, {}, "16GiB", "more than node memory"),
        ({"name": "a", "cpus": 64}, {}, "cpus: 64", "more than the node has"),
        ({"name": "a", "disk": "2GiB"}, {}, "2GiB", "larger than the 2GiB asked for"),
        ({"name": "a"}, {"storage": "nope-lvm"}, "nope-lvm", "does not exist on node pve1"),
        ({"name": "a"}, {"bridge": "vmbr9"}, "vmbr9", "bridge 'vmbr9' does not exist"),
        ({"name": "a"}, {"storage": "local"}, "storage: local", "does not hold VM disk images"),
        ({"name": "a"}, {"node": "pve7"}, "pve7", "node 'pve7' is not in the cluster"),
    ],
)
def test_what_pve_would_refuse_is_blocked_with_its_line(
    sand, fakepve_server, vm, overrides, needle, words
):
    rig = fakepve_server
    sees_node_memory(rig)
    sand.write(rig.manifest([vm], **overrides))
    text = sand.manifest.read_text()
    plan = sand.run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert words in plan.stdout, plan.stdout
    located(plan.stdout, text, needle)
    assert sand.run("apply", "--auto-approve").returncode == 1
    assert rig.vms() == [] and writes(rig) == []


def test_a_default_is_located_where_it_is_written(sand, fakepve_server):
    rig = fakepve_server
    sees_node_memory(rig)
    sand.write(rig.manifest([{"name": "a"}, {"name": "b"}], defaults={"memory": "32GiB"}))
    text = sand.manifest.read_text()
    plan = sand.run("plan")
    assert plan.returncode == 1
    assert plan.stdout.count("more than node memory") == 2
    located(plan.stdout, text, "32GiB")


def test_a_vm_that_is_not_a_template_is_refused(sand, fakepve_server):
    rig = fakepve_server
    rig.seed_vm(4242, "plain-vm", tags="ops")
    sand.write(rig.manifest([{"name": "a", "image": "4242"}]))
    plan = sand.run("plan")
    assert plan.returncode == 1 and "is not a template" in plan.stdout


def test_preflight_costs_the_same_for_one_vm_or_ten_and_nothing_on_a_noop(sand, fakepve_server):
    rig = fakepve_server
    counts = []
    for n in (1, 10):
        sand.write(rig.manifest([{"name": f"vm-{i}", "memory": "1GiB"} for i in range(n)]))
        rig.clear_log()
        assert sand.run("plan").returncode == 0
        counts.append(len(rig.log))
    # listing + nodes + storages + bridges + permissions + /cluster/options, and the
    # template's config (whether it has the cloud-init drive sand's role cannot attach)
    assert counts[0] == counts[1] <= 7, counts
    assert sand.run("apply", "--auto-approve").returncode == 0
    rig.clear_log()
    noop = sand.run("plan", "--detailed-exitcode")
    assert noop.returncode == 0, noop.stdout
    assert [r.path for r in rig.log] == ["/cluster/resources"]


def test_an_update_beyond_the_node_is_blocked_and_the_vm_left_as_it_is(sand, fakepve_server):
    rig = fakepve_server
    sees_node_memory(rig)
    sand.write(rig.manifest([{"name": "a", "memory": "2GiB"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    sand.write(rig.manifest([{"name": "a", "memory": "64GiB"}]))
    rig.clear_log()
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 1 and "more than node memory" in apply.stdout
    assert writes(rig) == []
    assert str(rig.vms_named("a")[0].config["memory"]) == "2048"


def test_a_missing_identity_is_blocked_before_the_lease_or_any_write(
    sand, fakepve_server, tmp_path
):
    rig = fakepve_server
    missing = tmp_path / "keys" / "id_ed25519"
    sand.write(rig.manifest([{"name": "agent-1"}], identity=str(missing)))
    text = sand.manifest.read_text()
    row = next(i for i, ln in enumerate(text.splitlines(), 1) if "identity:" in ln)
    rig.clear_log()
    plan = sand.run("plan")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert f"sand.yaml:{row}:" in plan.stdout and f"private key {missing} does not" in plan.stdout
    done = sand.run("apply", "--auto-approve")
    assert done.returncode == 1, done.stdout + done.stderr
    # Refused before the project's lease was taken: PVE saw reads only.
    assert [r for r in rig.log if r.method != "GET"] == []
    # The private key alone is not enough either: cloud-init installs the .pub.
    missing.parent.mkdir()
    missing.write_text("private\n")
    plan = sand.run("plan")
    assert plan.returncode == 1 and f"public key {missing}.pub does not exist" in plan.stdout
