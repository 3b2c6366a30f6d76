"""`sand sleep VM` and `sand wake VM`, a person's own decision, against fakepve: what PVE
was asked and what it holds, what plan and status say of a VM asleep, and a person's
stop told apart from a sleep."""

from __future__ import annotations

import json
import time

import pytest

from tests.cli.helpers import Sand


@pytest.fixture
def sand(tmp_path, fakepve_server):
    s = Sand(tmp_path)
    s.write(fakepve_server.manifest([{"name": "agent-1"}]))
    proc = s.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return s


def power_posts(rig) -> list[str]:
    return [r.path.rsplit("/", 1)[-1] for r in rig.requests("POST", contains="/status/")]


def test_sleep_hibernates_and_wake_resumes(sand, fakepve_server):
    rig = fakepve_server
    vmid = rig.vms_named("agent-1")[0].vmid
    rig.clear_log()
    proc = sand.run("sleep", "agent-1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "agent-1 is asleep (suspended)" in proc.stdout
    assert power_posts(rig) == ["suspend"]
    vm = rig.vm(vmid)
    assert (vm.status, vm.lock) == ("stopped", "suspended") and "vmstate" in vm.config

    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 0 and "No changes." in proc.stdout, proc.stdout + proc.stderr
    row = json.loads(sand.run("status", "--json").stdout)["vms"][0]
    assert row["asleep"]["by"] == "person" and row["conditions"]["Synced"] is True
    proc = sand.run("sleep", "agent-1")
    assert proc.returncode == 1 and "nothing to put to sleep" in proc.stderr
    assert "Traceback" not in proc.stderr

    rig.clear_log()
    proc = sand.run("wake", "agent-1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "waking agent-1, asleep since " in proc.stderr and "agent-1 is awake" in proc.stdout
    assert power_posts(rig) == ["resume"]
    vm = rig.vm(vmid)
    assert (vm.status, vm.lock, "vmstate" in vm.config) == ("running", None, False)
    proc = sand.run("wake", "agent-1")
    assert proc.returncode == 0 and "not asleep" in proc.stdout
    assert "asleep" not in json.loads(sand.run("status", "--json").stdout)["vms"][0]


def test_sleep_stop_is_asleep_but_a_persons_stop_is_drift(sand, fakepve_server):
    rig = fakepve_server
    vmid = rig.vms_named("agent-1")[0].vmid
    proc = sand.run("sleep", "--stop", "agent-1")
    assert proc.returncode == 0 and "(stopped)" in proc.stdout, proc.stdout + proc.stderr
    assert (rig.vm(vmid).status, rig.vm(vmid).lock) == ("stopped", None)
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 0 and "No changes." in proc.stdout, proc.stdout + proc.stderr
    assert sand.run("wake", "agent-1").returncode == 0
    assert rig.vm(vmid).status == "running"
    # Stopped by a person on PVE itself: not asleep, so planned back to running.
    rig.call(rig.pve._do_stop(rig.pve.vm(vmid), "root@pam", {}))
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 2 and 'state = "stopped" -> "running"' in proc.stdout
    proc = sand.run("wake", "agent-1")
    assert "not asleep" in proc.stdout and rig.vm(vmid).status == "stopped"


@pytest.mark.parametrize(("flags", "how"), [((), "suspended"), (("--stop",), "stopped")])
def test_another_host_reads_the_sleep_off_the_vm_itself(sand, fakepve_server, tmp_path, flags, how):
    """The sleep's record is a tag on the VM (the listing reads it for free): a second
    host (its own state dir) sees the VM asleep since then, by a person -- a stopped VM
    too, which it would otherwise start again as drift -- and its wake takes the tag off."""
    rig = fakepve_server
    vmid = rig.vms_named("agent-1")[0].vmid
    other = {"SAND_STATE_DIR": str(tmp_path / "other-host")}
    before = int(time.time())
    proc = sand.run("sleep", *flags, "agent-1")
    assert proc.returncode == 0 and f"({how})" in proc.stdout, proc.stdout + proc.stderr
    [mark] = [t for t in rig.vm(vmid).config["tags"].split(";") if t.startswith("sand-asleep-")]
    assert mark.startswith(f"sand-asleep-{how}-person-")
    assert before <= int(mark.rsplit("-", 1)[1]) <= time.time()

    rig.clear_log()
    proc = sand.run("plan", "--detailed-exitcode", env=other)
    assert proc.returncode == 0 and "No changes." in proc.stdout, proc.stdout + proc.stderr
    row = json.loads(sand.run("status", "--json", env=other).stdout)["vms"][0]
    # Every time in sand's JSON is ISO 8601 in UTC, this one too (not epoch seconds).
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(mark.rsplit("-", 1)[1])))
    assert row["asleep"] == {"how": how, "since": since, "by": "person"}
    assert row["conditions"]["Synced"] is True
    assert [r.method for r in rig.log] == ["GET"] * len(rig.log)  # read off the listing

    proc = sand.run("wake", "agent-1", env=other)
    assert proc.returncode == 0 and "waking agent-1, asleep since " in proc.stderr, proc.stderr
    vm = rig.vm(vmid)
    assert vm.status == "running" and "sand-asleep-" not in vm.config.get("tags", "")
    # The first host reads the VM as it is now: awake, whatever it recorded itself.
    assert "asleep" not in json.loads(sand.run("status", "--json").stdout)["vms"][0]


def test_wake_and_sleep_refuse_a_vm_the_manifest_does_not_declare(sand):
    for verb in ("wake", "sleep"):
        proc = sand.run(verb, "nobody")
        assert proc.returncode == 1 and "declares no VM named 'nobody'" in proc.stderr


def test_an_apply_that_must_change_a_vm_asleep_wakes_it_first(sand, fakepve_server, tmp_path):
    rig = fakepve_server
    vmid = rig.vms_named("agent-1")[0].vmid
    assert sand.run("sleep", "agent-1").returncode == 0
    sand.write(rig.manifest([{"name": "agent-1", "memory": "4GiB"}]))
    proc = sand.run("plan", "--detailed-exitcode")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "(woken first: asleep since " in proc.stdout and "(suspended))" in proc.stdout
    rig.clear_log()
    proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "waking agent-1, asleep since " in proc.stdout + proc.stderr
    posts = power_posts(rig)
    assert posts[0] == "resume" and "suspend" not in posts
    vm = rig.vm(vmid)
    assert vm.status == "running" and vm.lock is None and str(vm.config["memory"]) == "4096"
    assert "asleep" not in json.loads(sand.run("status", "--json").stdout)["vms"][0]


def test_after_a_clean_sleep_the_boards_journal_says_the_power_operation_is_done(
    sand, fakepve_server, monkeypatch
):
    """``sand sleep`` brackets its power operation in the journal, and no apply compacts
    it after: the board's detail pane reads the closed entry as done, not "begun"."""
    from sand.cli.ui.detail import journal_lines
    from sand.cli.ui.work import read_detail_files

    vmid = fakepve_server.vms_named("agent-1")[0].vmid
    proc = sand.run("sleep", "agent-1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    monkeypatch.setenv("SAND_STATE_DIR", str(sand.state_dir))  # the board reads it here
    journal, _ = read_detail_files("demo", "agent-1")
    lines = [line.split(" ", 2)[2] for line in journal_lines(journal)]
    assert lines[-1] == f"power {vmid} to suspended: done", lines
    assert not any("begun" in line or "open" in line for line in lines), lines
