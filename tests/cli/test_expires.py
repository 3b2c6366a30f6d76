"""``expires:`` through the real command line, against fakepve: a VM past its time is
planned for deletion, apply removes it from PVE (behind the guards), and it is not
made again while its ``expires:`` says it has passed.

These VMs have no guest, so the unpushed-work guard cannot sweep them: an expired VM
is refused until ``--allow-data-loss``, exactly as any delete (real guests holding real
work: tests/e2e/test_reset_guests.py).
"""

from __future__ import annotations

import json

import pytest

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from tests.cli.helpers import Sand

GO = ("apply", "--auto-approve")
DROP = ("--allow-data-loss",)
PAST = "2020-01-01"


@pytest.fixture
def sand(tmp_path) -> Sand:
    return Sand(tmp_path)


def changes(plan: dict) -> dict[str, dict]:
    return {c["vm"]: c for c in plan["changes"]}


def names(rig) -> list[str]:
    return sorted(v.name for v in rig.vms())


def made_earlier(rig, name: str, seconds: int) -> None:
    """Make ``name`` look as if sand had made it ``seconds`` earlier (tag and block)."""
    (vm,) = rig.vms_named(name)

    def edit() -> None:
        config = rig.pve.vm(vm.vmid).config
        block = desc.parse_block(config["description"]) or {}
        was = desc.created_at_of(block)
        assert was and mk.parse_tags(config["tags"]).created_at == was
        config["tags"] = config["tags"].replace(
            f"sand-created-{was}", f"sand-created-{was - seconds}"
        )
        config["description"] = config["description"].replace(
            f'"created_at": {was}', f'"created_at": {was - seconds}'
        )

    rig.run(edit)


@pytest.mark.sand_time_scale(0.01)  # the sweep's SSH attempts are not the subject
def test_a_vm_past_an_absolute_time_is_deleted_and_not_made_again(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}, {"name": "b", "memory": "1GiB"}]))
    assert sand.run(*GO).returncode == 0
    sand.write(
        rig.manifest(
            [{"name": "a", "memory": "1GiB", "expires": PAST}, {"name": "b", "memory": "1GiB"}]
        )
    )
    plan = sand.plan_json(*DROP)
    a = changes(plan)["a"]
    assert a["action"] == "delete" and a["reasons"] == ["expired at 2020-01-01T00:00:00Z"]
    assert changes(plan)["b"]["action"] == "no-op"

    # The guard cannot look into it: refused like any delete, until told.
    refused = sand.run(*GO)
    assert refused.returncode == 1 and "could not be swept" in refused.stdout, refused.stdout
    assert names(rig) == ["a", "b"]
    done = sand.run(*GO, *DROP)
    assert done.returncode == 0, done.stdout + done.stderr
    assert names(rig) == ["b"]

    again = sand.run("plan", "--detailed-exitcode")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "a (pve) expired at 2020-01-01T00:00:00Z and is not created again" in again.stdout
    assert changes(sand.plan_json())["a"]["reasons"] == [
        "expired at 2020-01-01T00:00:00Z, not created"
    ]
    assert sand.run(*GO).returncode == 0 and names(rig) == ["b"]
    # A later expiry brings it back.
    sand.write(
        rig.manifest(
            [
                {"name": "a", "memory": "1GiB", "expires": "2999-01-01"},
                {"name": "b", "memory": "1GiB"},
            ]
        )
    )
    assert sand.run(*GO).returncode == 0 and names(rig) == ["a", "b"]


def test_a_duration_counts_from_when_the_vm_was_made(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB", "expires": "2h"}]))
    assert sand.run(*GO).returncode == 0
    assert sand.run("plan", "--detailed-exitcode").returncode == 0  # young: nothing to do
    made_earlier(rig, "a", 3 * 3600)
    plan = sand.plan_json(*DROP)
    assert changes(plan)["a"]["action"] == "delete"
    assert changes(plan)["a"]["reasons"][0].startswith("expired at ")
    assert sand.run(*GO, *DROP).returncode == 0 and names(rig) == []

    # Gone for as long as the manifest keeps this expires: (this host recorded it) ...
    record = json.loads((sand.state_dir / "projects" / "demo" / "expired.json").read_text())
    assert [(v["name"], v["expires"]) for v in record["vms"]] == [("a", "2h")]
    kept = sand.run("plan", "--detailed-exitcode")
    assert kept.returncode == 0 and "is not created again" in kept.stdout, kept.stdout
    # ... and made again, its clock started afresh, once the expires: changes.
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB", "expires": "3h"}]))
    assert changes(sand.plan_json())["a"]["action"] == "create"
    assert sand.run(*GO).returncode == 0 and names(rig) == ["a"]
    assert not json.loads((sand.state_dir / "projects" / "demo" / "expired.json").read_text())[
        "vms"
    ]


def test_a_duration_on_a_vm_an_older_sand_made_deletes_nothing(sand, fakepve_server):
    rig = fakepve_server
    (vm,) = rig.desired([{"name": "a", "memory": "1GiB", "expires": "1m"}])
    rig.seed_managed(vm, 120)  # a marker without a creation time
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB", "expires": "1m"}]))
    plan = sand.run("plan", "--detailed-exitcode")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "expires: 1m counts from the VM's creation, which it does not record" in plan.stdout
    assert sand.run(*GO).returncode == 0 and [v.vmid for v in rig.vms()] == [120]


def test_expiries_are_behind_the_mass_delete_guard(sand, fakepve_server):
    rig = fakepve_server
    fleet = [{"name": n, "memory": "1GiB"} for n in ("a", "b", "c")]
    sand.write(rig.manifest(fleet))
    assert sand.run(*GO).returncode == 0
    sand.write(rig.manifest(fleet, defaults={"expires": PAST}))
    refused = sand.run(*GO, *DROP)
    assert refused.returncode == 1 and "--allow-mass-delete" in refused.stderr, refused.stderr
    assert names(rig) == ["a", "b", "c"]
    done = sand.run(*GO, *DROP, "--allow-mass-delete")
    assert done.returncode == 0, done.stdout + done.stderr
    assert names(rig) == []


def test_a_bad_expiry_is_a_located_error(sand, fakepve_server):
    sand.write(fakepve_server.manifest([{"name": "a", "expires": "soon"}]))
    row = next(i for i, ln in enumerate(sand.manifest.read_text().splitlines(), 1) if "soon" in ln)
    for verb in ("validate", "plan"):
        res = sand.run(verb)
        assert res.returncode == 1 and "Traceback" not in res.stderr
        assert f"sand.yaml:{row}:" in res.stderr and "'soon' is not a time" in res.stderr
    assert fakepve_server.vms() == []
