"""The unpushed-work guard, as far as it can be shown without a guest: a VM sand cannot
sweep is treated as holding work, so deleting or replacing it needs --allow-data-loss,
which --watch never passes. (Real guests with real unpushed commits: tests/e2e.)"""

from __future__ import annotations

import json

import pytest

from sand.survey.guard import _covered
from tests.cli.helpers import Sand


@pytest.fixture
def sand(tmp_path) -> Sand:
    return Sand(tmp_path)


def two(rig, sand: Sand) -> None:
    sand.write(
        rig.manifest([{"name": "keep", "memory": "1GiB"}, {"name": "drop", "memory": "1GiB"}])
    )
    assert sand.run("apply", "--auto-approve").returncode == 0
    sand.write(rig.manifest([{"name": "keep", "memory": "1GiB"}]))


@pytest.mark.sand_time_scale(0.01)  # the agent's 15 s of silence is not the subject
def test_a_vm_that_cannot_be_swept_is_not_deleted(sand, fakepve_server):
    rig = fakepve_server
    two(rig, sand)
    rig.stop_agent(rig.vms_named("drop")[0].vmid)  # no address: nothing to SSH to
    plan = sand.run("plan", "--json")
    assert plan.returncode == 1
    drop = next(c for c in json.loads(plan.stdout)["changes"] if c["vm"] == "drop")
    assert drop["action"] == "blocked" and drop["blocked_action"] == "delete"
    (blocker,) = drop["blockers"]
    assert blocker["kind"] == "data" and "--allow-data-loss" in blocker["reason"]
    assert "treated as holding work" in blocker["reason"]
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 1
    assert sorted(v.name for v in rig.vms()) == ["drop", "keep"]
    forced = sand.run("apply", "--auto-approve", "--allow-data-loss")
    assert forced.returncode == 0, forced.stdout + forced.stderr
    assert [v.name for v in rig.vms()] == ["keep"]


def test_a_stopped_vm_is_not_deleted_without_the_flag(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "keep"}, {"name": "drop", "state": "stopped"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    sand.write(rig.manifest([{"name": "keep"}]))
    plan = sand.run("plan")
    assert plan.returncode == 1 and "it is stopped" in plan.stdout, plan.stdout
    assert sand.run("apply", "--auto-approve").returncode == 1
    assert sorted(v.name for v in rig.vms()) == ["drop", "keep"]


def test_destroy_is_guarded_too(sand, fakepve_server):
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "a", "state": "stopped"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    assert sand.run("destroy", "--auto-approve").returncode == 1
    assert [v.name for v in rig.vms()] == ["a"]


def test_watch_never_takes_the_flag(sand, fakepve_server):
    sand.write(fakepve_server.manifest([]))
    res = sand.run("apply", "--watch", "--allow-data-loss")
    assert res.returncode == 1 and "never used with --watch" in res.stderr
    assert "Traceback" not in res.stderr


@pytest.mark.parametrize(
    ("path", "preserve", "kept"),
    [
        ("/home/u/src/app", ["~/src"], True),
        ("/home/u/src", ["~/src"], True),
        ("/home/u/srcx/app", ["~/src"], False),
        ("/home/u/work/app", ["~/src", "~/.claude"], False),
        ("/home/u/work/app", ["~"], True),
        ("/opt/app", ["~"], False),
    ],
)
def test_what_preserve_covers(path, preserve, kept):
    assert _covered(path, "/home/u", preserve) is kept
