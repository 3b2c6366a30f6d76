"""The plan after a kill says what the next apply does (issue 36, item 10): a real
`sand apply` is killed with SIGKILL mid-create of a fleet; `sand plan` (text and JSON)
then counts the VMs the apply adds and those it finishes from the journal, and the
following apply makes exactly that many (fakepve's request log, the stand-in's log),
keeping each finished VM as the one the killed run made."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli.helpers import Sand
from tests.crash.killer import env_for, kill_when, sand_argv
from tests.crash.test_crash_lima import Rig
from tests.crash.test_crash_proxmox import journal_path
from tests.machine_schemas import validate

FLEET = 8


def steps(name: str, count: int):
    return lambda records: (
        sum(1 for r in records if r.get("phase") == "step" and r.get("step") == name) >= count
    )


def uid_of(rig: Rig, vm: str) -> str:
    """The instance's incarnation, as its sidecar (sand's marker file) holds it."""
    return str(json.loads((rig.standin.instance_dir(vm) / "sand-marker.json").read_text())["uid"])


def planned(text: str, doc: dict) -> tuple[int, int, list[str]]:
    """(to add, to finish, the VMs finished) as the text and the JSON plan both say."""
    validate("plan", doc)
    summary = doc["summary"]
    finished = sorted(c["vm"] for c in doc["changes"] if c["finishes_interrupted_create"])
    line = f"Plan: {summary['add']} to add, {summary['finish']} to finish, 0 to change, 0 to "
    assert line in text, text
    assert len(finished) == summary["finish"]
    for vm in finished:
        assert f'> vm "{vm}"' in text and f"# {vm} (" in text, text
    assert text.count("will be finished: adopted from the journal") == len(finished), text
    return summary["add"], summary["finish"], finished


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_the_plan_after_a_kill_mid_create_on_proxmox_is_what_apply_does(
    tmp_path, fakepve_server
) -> None:
    rig = fakepve_server
    rig.set_task_secs("qmclone", 2.0)
    rig.set_task_secs("qmstart", 2.0)
    sand = Sand(tmp_path)
    sand.write(rig.manifest([{"name": f"vm-{i}"} for i in range(FLEET)]))
    argv = sand_argv("apply", "--auto-approve", "--parallelism", "6")
    killed = kill_when(
        argv, env_for(sand.state_dir), tmp_path, journal_path(sand), steps("configured", 3),
        delay=0.2,
    )  # fmt: skip
    assert killed, "the apply finished before the kill"
    text = sand.run("plan").stdout
    add, finish, finished = planned(text, json.loads(sand.run("plan", "--json").stdout))
    assert add and finish and add + finish == FLEET, text
    made = {vm.name: vm.vmid for vm in rig.vms()}

    rig.clear_log()
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    clones = [r for r in rig.requests("POST") if re.search(r"/qemu/\d+/clone$", r.path)]
    assert len(clones) == add
    now = {vm.name: vm.vmid for vm in rig.vms()}
    assert sorted(now) == [f"vm-{i}" for i in range(FLEET)]
    assert {vm: now[vm] for vm in finished} == {vm: made[vm] for vm in finished}


def test_the_plan_after_a_kill_mid_create_on_lima_is_what_apply_does(tmp_path) -> None:
    rig = Rig(tmp_path)
    rig.standin.configure(create_delay=0.5, start_delay=1.5)
    rig.write("".join(f"  - name: v{i}\n" for i in range(FLEET)))
    argv = sand_argv("apply", "--auto-approve", "--parallelism", "4", str(rig.manifest))
    killed = kill_when(argv, rig.env(), rig.root, rig.journal, steps("marked", 3), delay=0.1)
    assert killed, "the apply finished before the kill"
    rig.settle()
    rig.standin.configure(create_delay=0.0, start_delay=0.0)
    text = rig.sand("plan").stdout
    add, finish, finished = planned(text, json.loads(rig.sand("plan", "--json").stdout))
    assert add and finish and add + finish == FLEET, text
    uids = {vm: uid_of(rig, vm) for vm in finished}

    rig.standin.clear_log()
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    made = [
        i.argv
        for i in rig.standin.invocations()
        if i.command in ("create", "clone") and "--list-templates" not in i.argv
    ]
    assert len(made) == add, made
    assert rig.vms() == [f"v{i}" for i in range(FLEET)]
    assert {vm: uid_of(rig, vm) for vm in finished} == uids
