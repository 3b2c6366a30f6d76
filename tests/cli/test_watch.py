"""`sand apply --watch` against fakepve: debounce, single-flight, invalid edits,
periodic re-observation and opt-in self-heal."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest
import yaml

from tests.cli.helpers import Sand, as_from_a_terminal

RUN = re.compile(r"watch: run (\d+) \((.+)\)")


class Watch:
    def __init__(self, sand: Sand, *args: str) -> None:
        env = {**os.environ, "SAND_STATE_DIR": str(sand.state_dir), "NO_COLOR": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sand", "apply", "--watch", *args],
            cwd=sand.workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=as_from_a_terminal,  # it is sent Ctrl-C
        )
        self.err: list[str] = []
        self.out: list[str] = []
        for stream, sink in ((self.proc.stderr, self.err), (self.proc.stdout, self.out)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream, sink) -> None:
        for line in stream:
            sink.append(line)

    def runs(self) -> list[tuple[int, str]]:
        return [(int(m[1]), m[2]) for line in self.err if (m := RUN.search(line))]

    def wait_for(self, predicate, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError("timed out; stderr:\n" + "".join(self.err))

    def idle(self, settle: float = 1.5, longest: float = 20.0) -> None:
        """Wait until no new line has appeared for ``settle`` seconds (or ``longest``)."""
        last = -1
        deadline = time.monotonic() + longest
        while time.monotonic() < deadline:
            count = len(self.err) + len(self.out)
            if count == last:
                return
            last = count
            time.sleep(settle)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture
def watched(tmp_path, fakepve_server):
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest([{"name": "w-1"}]))
    watches: list[Watch] = []

    def start(*args: str) -> Watch:
        w = Watch(sand, "--debounce", "0.3", *args)
        watches.append(w)
        w.wait_for(lambda: len(fakepve_server.vms()) == 1)
        w.wait_for(lambda: any("Apply complete" in line or "No changes" in line for line in w.out))
        w.idle(longest=3.0)
        return w

    yield sand, start
    for w in watches:
        w.stop()


def names(rig):
    return sorted(vm.name for vm in rig.vms())


def save_burst(sand: Sand, data: dict) -> None:
    """What an editor does on save: write a temp file, rename it over, touch again."""
    text = yaml.safe_dump(data, sort_keys=False)
    tmp = sand.manifest.with_suffix(".yaml.tmp")
    tmp.write_text(text)
    os.replace(tmp, sand.manifest)
    time.sleep(0.05)
    sand.manifest.write_text(text)
    time.sleep(0.05)
    os.utime(sand.manifest)


def test_a_save_burst_gives_exactly_one_run(watched, fakepve_server):
    sand, start = watched
    w = start("--interval", "3600")
    before = len(w.runs())
    save_burst(sand, fakepve_server.manifest([{"name": "w-1"}, {"name": "w-2"}]))
    w.wait_for(lambda: len(fakepve_server.vms()) == 2)
    w.idle()
    assert len(w.runs()) == before + 1
    assert w.runs()[-1][1] == "manifest saved"
    assert names(fakepve_server) == ["w-1", "w-2"]


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_changes_during_a_run_cause_exactly_one_follow_up(watched, fakepve_server):
    sand, start = watched
    w = start("--interval", "3600")
    # The clone of w-2 lasts until the saves below have all landed, however slowly a
    # loaded machine schedules the test: it is ended then (fast_forward), not waited out.
    fakepve_server.set_task_secs("qmclone", 600.0)
    before = len(w.runs())
    save_burst(sand, fakepve_server.manifest([{"name": "w-1"}, {"name": "w-2"}]))
    w.wait_for(lambda: len(w.runs()) == before + 1)
    w.wait_for(lambda: fakepve_server.vms_named("w-2"))  # the run is now cloning w-2
    for n in (3, 4, 5):
        save_burst(sand, fakepve_server.manifest([{"name": f"w-{i}"} for i in range(1, n + 1)]))
        time.sleep(0.5)
    assert len(w.runs()) == before + 1 and not fakepve_server.vms_named("w-3")  # still cloning
    fakepve_server.set_task_secs("qmclone", 0)
    fakepve_server.fast_forward()
    w.wait_for(lambda: len(fakepve_server.vms()) == 5, timeout=120)
    w.idle(3.0)
    runs = w.runs()[before:]
    assert len(runs) == 2, runs  # the saved-during-run changes collapsed into one
    assert names(fakepve_server) == ["w-1", "w-2", "w-3", "w-4", "w-5"]


def test_saving_the_hosts_secrets_map_re_applies(watched, fakepve_server):
    # secrets.yaml beside the manifest says where named-only secrets come from.
    sand, start = watched
    w = start("--interval", "3600")
    before = len(w.runs())
    (sand.workdir / "secrets.yaml").write_text("secrets: {}\n")
    w.wait_for(lambda: len(w.runs()) == before + 1)
    assert w.runs()[-1][1] == "manifest saved"


def test_an_invalid_edit_keeps_the_last_good_manifest(watched, fakepve_server):
    sand, start = watched
    w = start("--interval", "3600")
    sand.manifest.write_text("apiVersion: sand/v1\nproject: demo\nvms: [\n")
    w.wait_for(lambda: any("keeping the last good one" in line for line in w.err))
    w.idle()
    assert names(fakepve_server) == ["w-1"]  # nothing pruned on a broken file
    assert any("sand.yaml:" in line for line in w.err)
    save_burst(sand, fakepve_server.manifest([{"name": "w-1"}, {"name": "w-9"}]))
    w.wait_for(lambda: len(fakepve_server.vms()) == 2)


def test_periodic_reobservation_reports_drift_without_self_heal(watched, fakepve_server):
    _sand, start = watched
    rig = fakepve_server
    w = start("--interval", "1")
    vmid = rig.vms()[0].vmid
    rig.run(lambda: rig.pve.vm(vmid).config.__setitem__("cores", 6))
    w.wait_for(lambda: any("changed outside of sand" in line for line in w.out))
    w.wait_for(lambda: sum(1 for _, r in w.runs() if r == "periodic") >= 2)
    assert int(rig.vm(vmid).config["cores"]) == 6  # reported, not corrected


def test_self_heal_corrects_drift(tmp_path, fakepve_server):
    rig = fakepve_server
    sand = Sand(tmp_path)
    data = rig.manifest([{"name": "w-1"}])
    data["selfHeal"] = True
    sand.write(data)
    w = Watch(sand, "--debounce", "0.3", "--interval", "1")
    try:
        w.wait_for(lambda: len(rig.vms()) == 1)
        # A periodic run has begun, so the first one (the create) is over; waiting for
        # quiet instead would wait for nothing: a run a second never goes quiet.
        w.wait_for(lambda: any(why == "periodic" for _, why in w.runs()))
        vmid = rig.vms()[0].vmid
        rig.run(lambda: rig.pve.vm(vmid).config.__setitem__("cores", 6))
        w.wait_for(lambda: int(rig.vm(vmid).config["cores"]) == 2, timeout=60)
    finally:
        w.stop()


def test_watch_shows_each_runs_progress_and_ctrl_c_between_runs_exits_0(watched):
    _sand, start = watched
    w = start()
    # The first run's progress reached stderr as timestamped lines.
    assert any(re.search(r"\d\d:\d\d:\d\d w-1: done$", line.rstrip()) for line in w.err), w.err
    # Ctrl-C between runs: a watch is meant to be stopped so, exit 0.
    w.proc.send_signal(signal.SIGINT)
    assert w.proc.wait(timeout=30) == 0
    w.wait_for(lambda: any("watch: stopped" in line for line in w.err))


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_ctrl_c_during_a_watch_run_exits_130_naming_the_vm(tmp_path, fakepve_server):
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest([{"name": "w-2"}]))
    fakepve_server.set_task_secs("qmclone", 30.0)
    w = Watch(sand, "--debounce", "0.3")
    try:
        w.wait_for(lambda: bool(fakepve_server.vms()))  # the clone has begun
        w.wait_for(lambda: any("clone of template" in line for line in w.err))
        w.proc.send_signal(signal.SIGINT)
        assert w.proc.wait(timeout=60) == 130
        w.wait_for(lambda: any("Interrupted: w-2 was creating" in line for line in w.err))
        assert not any("Traceback" in line for line in w.err)
    finally:
        w.stop()
    # What the message promises: the next apply settles it (once the clone is done).
    fakepve_server.set_task_secs("qmclone", 0.0)
    fakepve_server.fast_forward()
    again = sand.run("apply", "--auto-approve")
    assert again.returncode == 0, again.stdout + again.stderr
    assert [vm.name for vm in fakepve_server.vms()] == ["w-2"]
