"""Failure injection: listings that cannot be trusted, failing starts, crash recovery."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from sand.backends.lima import LimaBackend
from sand.errors import BackendError
from sand.observed import Ownership
from sand.state.journal import Journal
from tests.backends.lima.conftest import MakeBackend, build_golden, desired, golden_desired, one
from tests.limactl_standin import StandIn
from tests.required import require

FIVE_VMS = "".join(f"  - name: vm{i}\n" for i in range(5))


async def _fleet(backend: LimaBackend, journal: Journal, vms: str = FIVE_VMS) -> None:
    state = desired(vms)
    await backend.observe(state.vms)
    for vm in state.vms:
        await backend.mark_converged(vm, await backend.create(vm, journal))


async def test_a_failing_listing_makes_the_host_unknown(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    await _fleet(backend, journal)
    standin.fail("list", "failed to connect to the host agent socket")
    obs = await backend.observe(desired(FIVE_VMS).vms)
    assert obs.unknown_reason is not None
    assert "limactl list --json" in obs.unknown_reason
    assert "failed to connect" in obs.unknown_reason
    assert obs.vms == ()  # nothing here may read as "gone"
    assert obs.requests == 1


async def test_an_instance_without_lima_yaml_makes_the_host_unknown(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    await _fleet(backend, journal, "  - name: vm1\n")
    (standin.lima_home / "halfway").mkdir()  # what a clone looks like before lima.yaml
    obs = await backend.observe([one()])
    assert obs.unknown_reason is not None
    assert "halfway" in obs.unknown_reason and "5236" in obs.unknown_reason
    # The listing itself was fine: the managed VM is still shown, nothing else is implied.
    assert [v.name for v in obs.vms] == ["halfway", "vm1"]
    assert next(v for v in obs.vms if v.name == "halfway").lock is not None


async def test_an_old_lima_failing_mid_clone_makes_the_host_unknown(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    standin.configure(version="2.1.1")
    await _fleet(backend, journal, "  - name: vm1\n  - name: vm2\n")
    (standin.lima_home / "halfway").mkdir()
    obs = await backend.observe(desired("  - name: vm1\n  - name: vm2\n").vms)
    assert obs.unknown_reason is not None and "lima.yaml" in obs.unknown_reason
    assert obs.vms == ()
    assert any("older than 2.2.0" in w for w in obs.warnings)


async def test_observing_during_a_real_slow_clone(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    await _fleet(backend, journal, "  - name: vm1\n")
    standin.run("stop", "vm1")
    standin.configure(clone_delay=1.5)
    person = subprocess.Popen(
        [str(standin.executable), "--tty=false", "clone", "vm1", "copy"],
        env=standin.env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not (standin.lima_home / "copy").exists():
            assert time.monotonic() < deadline, "the clone never started"
            await asyncio.sleep(0.02)
        obs = await backend.observe([one()])
        assert obs.unknown_reason is not None and "copy" in obs.unknown_reason
    finally:
        assert person.wait(20) == 0
    standin.configure(clone_delay=None)
    obs = await backend.observe([one()])
    assert obs.unknown_reason is None
    assert {v.name: v.ownership for v in obs.vms} == {
        "copy": Ownership.COPIED,
        "vm1": Ownership.MANAGED,
    }


async def test_a_listing_that_is_not_json_lines_is_untrusted(
    standin: StandIn, backend: LimaBackend, tmp_path: Path
) -> None:
    fake = tmp_path / "bin" / "limactl"
    fake.parent.mkdir()
    fake.write_text(
        '#!/bin/sh\ncase "$*" in *list*) echo \'[{"name": "x"}]\';; *) echo v2.2.0;; esac\n'
    )
    fake.chmod(0o755)
    b = LimaBackend("laptop", project="demo", runner=backend.runner, limactl=str(fake))
    obs = await b.observe([])
    assert obs.unknown_reason is not None and "not a JSON object" in obs.unknown_reason


async def test_a_failing_start_is_a_backend_error_with_the_log(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    standin.fail("start", 'did not receive an event with the "running" status', name="vm1")
    vm = one()
    await backend.observe([vm])
    with pytest.raises(BackendError) as err:
        await backend.create(vm, journal)
    assert err.value.layer == "backend"
    text = str(err.value)
    assert text.startswith("backend laptop: `limactl start vm1` failed")
    assert "did not receive an event" in text and "ha.stderr.log" in text
    # The host agent's JSON lines read as words: `level: msg`, no JSON punctuation.
    assert '  | fatal: did not receive an event with the "running" status' in text
    assert '{"level"' not in text
    # The instance is marked (fingerprint ""), so the next plan converges it; the journal
    # entry is closed because nothing is left half-made.
    assert journal.pending() == []
    standin.clear_faults()
    obs = await backend.observe([vm])
    (vm1,) = obs.vms
    assert vm1.ownership is Ownership.MANAGED and vm1.power == "stopped" and vm1.lock is None
    assert vm1.fingerprint == ""


async def test_a_failing_clone_leaves_nothing_behind(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    state = golden_desired("  - name: b\n")
    await backend.observe(state.vms)
    await build_golden(backend, state.vms[0], journal)
    standin.fail("clone", "no space left on device", name="b")
    with pytest.raises(BackendError, match="no space left"):
        await backend.create(state.vms[0], journal, from_base=True)
    assert "b" not in standin.instances()
    assert journal.pending() == []


async def test_a_rejected_clone_edit_is_cleaned_up(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    # Lima leaves the new directory behind when the edit after a clone is rejected.
    state = golden_desired("  - name: c\n")
    await backend.observe(state.vms)
    base = (await build_golden(backend, state.vms[0], journal)).identity
    y = standin.read_yaml(base)
    y["disk"] = "50GiB"  # the clone's 20GiB now shrinks it: Lima refuses the edit
    standin.write_yaml(base, y)
    with pytest.raises(BackendError, match="shrinking"):
        await backend.create(state.vms[0], journal, from_base=True)
    assert "c" not in standin.instances()


# --- recovery after a crash -----------------------------------------------------------


def _entry(journal: Journal, op: str, name: str, **details: object) -> dict[str, object]:
    entry = journal.begin(op, backend="laptop", vm=name, identity=name, **details)
    (pending,) = [p for p in journal.pending() if p.id == entry.id]
    return pending


async def test_recover_create_never_started(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    how = await backend.recover(_entry(journal, "create", "vm1", via="create"))
    assert "never created" in how


async def test_recover_adopts_a_marked_instance(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    vm = one()
    await backend.observe([vm])
    await backend.create(vm, journal)
    how = await backend.recover(_entry(journal, "create", "vm1", via="create"))
    assert how.startswith("adopted vm1")
    assert "vm1" in standin.instances()


async def test_recover_deletes_a_half_made_instance(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    # Crash after `limactl create` returned, before the marker was written.
    standin.fail("start", "boom")
    vm = one()
    body = (
        "param: {sandProject: demo, sandInstance: vm1}\n"
        "provision: [{mode: data, path: /etc/sand-instance, "
        "content: '{{.Param.sandProject}} {{.Param.sandInstance}}'}]\n"
    )
    standin.run("create", "--name=vm1", "-", input=body)
    obs = await backend.observe([vm])
    (half,) = obs.vms
    assert half.ownership is Ownership.MANAGED and half.lock == "creating (no sand marker yet)"
    how = await backend.recover(_entry(journal, "create", "vm1", via="create"))
    assert "deleted the half-made vm1" in how
    assert standin.instances() == []


async def test_recover_removes_a_half_copied_directory(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    d = standin.lima_home / "vm1"
    d.mkdir()
    (d / "disk").write_bytes(b"\0" * 16)
    how = await backend.recover(_entry(journal, "create", "vm1", via="clone:x"))
    assert "half-copied" in how and not d.exists()
    # ...and a half-deleted one.
    d.mkdir()
    how = await backend.recover(_entry(journal, "delete", "vm1"))
    assert "finished removing" in how and not d.exists()


async def test_recover_never_touches_a_stranger(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    standin.make_instance("vm1", {"cpus": 1})
    how = await backend.recover(_entry(journal, "create", "vm1", via="create"))
    assert how.startswith("left vm1 alone")
    assert standin.instances() == ["vm1"]
    how = await backend.recover(_entry(journal, "delete", "vm1"))
    assert "still there" in how and standin.instances() == ["vm1"]


async def test_recover_a_crashed_clone_from_the_base(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    state = golden_desired("  - name: b\n")
    await backend.observe(state.vms)
    base = (await build_golden(backend, state.vms[0], journal)).identity
    standin.run("clone", base, "b")  # crash: cloned, but neither edited nor marked
    how = await backend.recover(_entry(journal, "create", "b", via=f"clone:{base}"))
    assert "deleted the half-made b" in how and "b" not in standin.instances()


async def test_recover_a_half_built_base(
    standin: StandIn, backend: LimaBackend, make_backend: MakeBackend, journal: Journal
) -> None:
    state = golden_desired("  - name: a\n")
    await backend.observe(state.vms)
    base = (await build_golden(backend, state.vms[0], journal)).identity
    assert "complete" in await backend.recover(_entry(journal, "base", base))
    (standin.instance_dir(base) / "sand-base.json").unlink()  # crash before the stamp
    how = await backend.recover(_entry(journal, "base", base))
    assert "removed the half-built base" in how and base not in standin.instances()
    # The next run rebuilds it.
    fresh = make_backend()
    await fresh.observe(state.vms)
    await build_golden(fresh, state.vms[0], journal)
    assert base in standin.instances()


async def test_journal_records_intent_before_each_mutation(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    state = golden_desired("  - name: a\n")
    await backend.observe(state.vms)
    await build_golden(backend, state.vms[0], journal)
    current = await backend.create(state.vms[0], journal, from_base=True)
    await backend.delete(current, journal)
    records = [json.loads(line) for line in journal.path.read_text().splitlines()]
    intents = [(r["op"], r["vm"]) for r in records if r["phase"] == "intent"]
    assert ("base", next(n for n in standin.instances() if n.startswith("sand-base"))) in intents
    assert ("create", "a") in intents and ("delete", "a") in intents
    steps = [r["step"] for r in records if r["phase"] == "step"]
    for s in ("created", "stamped", "marked", "started", "deleted"):
        assert s in steps
    # The intent is on disk before limactl runs: compare with the stand-in's log.
    create_intent = next(r for r in records if r["phase"] == "intent" and r["op"] == "create")
    clone = next(i for i in standin.invocations() if i.command == "clone")
    assert create_intent["ts"] <= clone.time


async def test_limactl_refusing_root_is_reported(
    standin: StandIn, backend: LimaBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    require(os.geteuid() == 0, "needs root to test the refusal")
    monkeypatch.delenv("LIMACTL_STANDIN_ALLOW_ROOT")
    obs = await backend.observe([])
    assert obs.unknown_reason is not None and "must not run as the root user" in obs.unknown_reason


# printf(1) escapes: OSC 52, a title, an 8-bit CSI (UTF-8), CR and a fake success line.
HOSTILE_PRINTF = (
    r"\033]52;c;cHduZWQ=\007\033]0;owned\007\302\2332J\rApply complete! Resources: 1 added."
)


async def test_limactl_and_hostagent_text_in_an_error_is_inert(
    standin: StandIn, backend: LimaBackend, journal: Journal, tmp_path: Path
) -> None:
    # A limactl whose start fails the way a hostagent relaying a guest's words
    # would: raw escapes on stderr and in ha.stderr.log (real limactl quotes its
    # own messages, but not everything a guest can make it repeat).
    wrapper = tmp_path / "bin-hostile" / "limactl"
    wrapper.parent.mkdir()
    wrapper.write_text(
        "#!/bin/sh\n"
        'case " $* " in *" start "*)\n'
        '  for last; do :; done\n  log="$LIMA_HOME/$last/ha.stderr.log"\n'
        f"  printf 'level=info msg=booting\\n{HOSTILE_PRINTF}\\n' > \"$log\"\n"
        f"  printf 'level=fatal msg=exiting\\n{HOSTILE_PRINTF}\\n' >&2\n"
        "  exit 1;;\n"
        "esac\n"
        f'exec "{standin.executable}" "$@"\n'
    )
    wrapper.chmod(0o755)
    b = LimaBackend("laptop", project="demo", runner=backend.runner, limactl=str(wrapper))
    vm = one()
    await b.observe([vm])
    with pytest.raises(BackendError) as err:
        await b.create(vm, journal)
    text = str(err.value)
    assert "`limactl start vm1` failed" in text and "ha.stderr.log" in text
    assert not any(c in text for c in "\x1b\x07\x9b\r"), repr(text)
    assert "cHduZWQ" not in text and "owned" not in text
    assert not [ln for ln in text.splitlines() if ln.startswith("Apply complete!")]
    assert text.count("| Apply complete! Resources: 1 added.") == 2  # stderr and the log


def test_a_marker_cut_short_by_a_killed_sand_never_replaces_a_whole_one(tmp_path) -> None:
    """The sidecar script reads the marker from sand's pipe; a sand killed before it wrote
    it all closes that pipe early. The instance keeps the marker it had."""
    import subprocess

    from sand.backends.lima import scripts

    inst = tmp_path / "agent-1"
    inst.mkdir()
    (inst / "lima.yaml").write_text("images: []\n")
    whole = b'{"project": "demo", "identity": "agent-1"}\n'
    (inst / scripts.MARKER_FILE).write_bytes(whole)
    newer = b'{"project": "demo", "identity": "agent-1", "name": "x"}\n'
    env = {"LIMA_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    argv = scripts.write_sidecar_argv("agent-1", scripts.MARKER_FILE, len(newer))
    for cut in (b"", newer[:10]):
        proc = subprocess.run(argv, input=cut, env=env, capture_output=True, check=False)
        assert proc.returncode == 4 and b"cut short" in proc.stderr
        assert (inst / scripts.MARKER_FILE).read_bytes() == whole
        assert sorted(p.name for p in inst.iterdir()) == ["lima.yaml", scripts.MARKER_FILE]
    proc = subprocess.run(argv, input=newer, env=env, capture_output=True, check=False)
    assert proc.returncode == 0 and (inst / scripts.MARKER_FILE).read_bytes() == newer


def test_a_configuration_cut_short_by_a_killed_sand_creates_nothing(tmp_path) -> None:
    """limactl create reads sand's generated lima.yaml; a sand killed before it wrote it
    all once left Lima to create an instance from the --set values alone (no image, no
    project marker: an orphan nobody removes). Now nothing is created unless it is whole."""
    from sand.backends.lima import scripts

    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    env = {**os.environ, **standin.env()}
    body = b"cpus: 3\nmemory: 3GiB\n"
    limactl = [str(standin.executable), "--tty=false", "create", "--name=agent-1"]
    argv = scripts.create_from_stdin_argv(len(body), "agent-1", limactl)
    for cut in (b"", body[:20]):
        proc = subprocess.run(argv, input=cut, env=env, capture_output=True, check=False)
        assert proc.returncode == 4 and b"cut short" in proc.stderr, proc.stderr
        assert standin.instances() == []
        assert "create" not in standin.commands()
    proc = subprocess.run(argv, input=body, env=env, capture_output=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert standin.instances() == ["agent-1"]
    assert standin.read_yaml("agent-1")["cpus"] == 3
    assert list((tmp_path / "lima" / "_sand").iterdir()) == []  # the file is not left behind
