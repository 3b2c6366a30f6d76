"""A fork on Lima, on the limactl stand-in (issue 29, item 1): the source is stopped,
cloned and started again; the fork carries its own marker, the source's files are
untouched; the forks one apply makes of one source share one stop of it; a fork of an
instance that is not this project's is refused."""

from __future__ import annotations

import json

import pytest

from tests.crash.test_crash_lima import Rig
from tests.machine_schemas import validate

SOURCE = "  - name: agent-1\n"
FORK = "  - name: try-1\n    from: {vm: agent-1}\n"
TWO_FORKS = FORK + "  - name: try-2\n    from: {vm: agent-1}\n"
THREE_FORKS = TWO_FORKS + "  - name: try-3\n    from: {vm: agent-1}\n"


def sidecar(rig: Rig, name: str) -> dict[str, object]:
    data: dict[str, object] = json.loads(
        (rig.standin.instance_dir(name) / "sand-marker.json").read_text()
    )
    return data


def source_files(rig: Rig) -> dict[str, bytes]:
    d = rig.standin.instance_dir("agent-1")
    return {
        p.name: p.read_bytes()
        for p in d.iterdir()
        if p.is_file() and p.name in ("lima.yaml", "sand-marker.json", "protected")
    }


def made(rig: Rig) -> Rig:
    rig.write(SOURCE)
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return rig


def calls(rig: Rig, *verbs: str) -> list[str]:
    """The limactl calls since the log was cleared, as "verb operand...", of ``verbs``."""
    out = []
    for inv in rig.standin.invocations():
        words = [w for w in inv.argv[1:] if not w.startswith("-")]
        if words and words[0] in verbs:
            out.append(" ".join(words))
    return out


def status(rig: Rig, name: str) -> str:
    (entry,) = rig.standin.list_json(name)
    return str(entry["status"])


def test_a_fork_stops_copies_and_starts_its_source(tmp_path):
    rig = made(Rig(tmp_path))
    before = source_files(rig)
    rig.write(SOURCE + FORK)
    plan = rig.sand("plan")
    assert '+ vm "try-1" (fork of agent-1 at apply time: stops agent-1 for the copy) {' in (
        plan.stdout
    ), plan.stdout
    rig.standin.clear_log()
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    acts = calls(rig, "stop", "clone", "start", "edit", "protect")
    # The fork goes on (its marker, its start) as soon as its copy exists, while the
    # source starts again: those two starts may come in either order.
    assert acts[:2] == ["stop agent-1", "clone agent-1 try-1"], acts
    assert sorted(acts[2:]) == ["start agent-1", "start try-1"], acts
    assert rig.vms() == ["agent-1", "try-1"]
    assert status(rig, "agent-1") == "Running" and status(rig, "try-1") == "Running"
    assert source_files(rig) == before  # the source: stopped and started, nothing else
    mine, theirs = sidecar(rig, "try-1"), sidecar(rig, "agent-1")
    assert mine["identity"] == "try-1" and mine["image"] == "fork:agent-1"
    assert mine["uid"] != theirs["uid"]
    assert rig.sand("plan", "--detailed-exitcode").returncode == 0


def test_a_stopped_source_is_copied_as_it_is_and_stays_stopped(tmp_path):
    rig = Rig(tmp_path)
    rig.write("  - name: agent-1\n    state: stopped\n")
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.write("  - name: agent-1\n    state: stopped\n" + FORK)
    rig.standin.clear_log()
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The fork inherits state: stopped (it is started to be made, then stopped).
    assert calls(rig, "stop", "start", "clone") == [
        "clone agent-1 try-1",
        "start try-1",
        "stop try-1",
    ]
    assert status(rig, "agent-1") == "Stopped" and status(rig, "try-1") == "Stopped"


def source_calls(rig: Rig) -> list[str]:
    """The stops, clones and starts of the source agent-1 since the log was cleared."""
    return [c for c in calls(rig, "stop", "start", "clone") if "agent-1" in c.split()[:2]]


@pytest.mark.parametrize("parallelism", ["1", "4"])
def test_forks_of_one_source_in_one_apply_stop_it_once(parallelism, tmp_path):
    """Three forks of one source in one apply: the source is stopped once, copied three
    times and started once (with one slot too: the first fork copies for all)."""
    rig = made(Rig(tmp_path))
    rig.write(SOURCE + THREE_FORKS)
    plan = rig.sand("plan").stdout
    for fork, others in (("try-1", "try-2, try-3"), ("try-3", "try-1, try-2")):
        shared = f"  #   agent-1 is stopped once for this copy and those of {others}\n"
        assert f'{shared}  + vm "{fork}" (fork of agent-1 at apply time' in plan, plan
    rig.standin.clear_log()
    proc = rig.sand("apply", "--auto-approve", "--parallelism", parallelism)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rig.vms() == ["agent-1", "try-1", "try-2", "try-3"]
    assert source_calls(rig) == [
        "stop agent-1",
        "clone agent-1 try-1",
        "clone agent-1 try-2",
        "clone agent-1 try-3",
        "start agent-1",
    ]
    uids = {sidecar(rig, n)["uid"] for n in ("agent-1", "try-1", "try-2", "try-3")}
    assert len(uids) == 4
    assert {sidecar(rig, n)["identity"] for n in ("try-1", "try-2", "try-3")} == {
        "try-1",
        "try-2",
        "try-3",
    }
    assert status(rig, "agent-1") == "Running"
    assert all(status(rig, n) == "Running" for n in ("try-1", "try-2", "try-3"))
    assert rig.sand("plan", "--detailed-exitcode").returncode == 0


def test_the_json_plan_names_the_forks_that_share_one_stop(tmp_path):
    """What the text says under each fork ("agent-1 is stopped once for this copy and
    those of ..."), the JSON says in ``fork_of.stop_shared_with``; a lone fork's is empty."""
    rig = made(Rig(tmp_path))
    for forks, shared in (
        (THREE_FORKS, {"try-1": ["try-2", "try-3"], "try-3": ["try-1", "try-2"]}),
        (FORK, {"try-1": []}),
    ):
        rig.write(SOURCE + forks)
        proc = rig.sand("plan", "--json")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        data = json.loads(proc.stdout)
        validate("plan", data)
        made_from = {c["vm"]: c["fork_of"] for c in data["changes"] if "fork_of" in c}
        for fork, others in shared.items():
            assert made_from[fork] == {
                "vm": "agent-1",
                "memory": False,
                "stops_source": True,
                "force": False,
                "stop_shared_with": others,
            }


def test_forks_of_one_source_in_separate_applies_each_stop_it(tmp_path):
    """Only the forks one apply makes share a stop: a later fork stops the source again."""
    rig = made(Rig(tmp_path))
    rig.write(SOURCE + FORK)
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.write(SOURCE + TWO_FORKS)
    assert "is stopped once" not in rig.sand("plan").stdout  # one fork: no one to share with
    rig.standin.clear_log()
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert source_calls(rig) == ["stop agent-1", "clone agent-1 try-2", "start agent-1"]


def test_a_fork_of_an_instance_that_is_not_this_projects_is_refused(tmp_path):
    rig = Rig(tmp_path)
    rig.standin.make_instance("agent-1")  # a person's instance of that name
    rig.write(SOURCE + FORK)
    rig.standin.clear_log()
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode != 0
    # Located at the fork's from: (line 9 of the manifest the rig writes).
    assert (
        f"{rig.manifest}:9:11: its source 'agent-1' is not a VM sand manages on backend "
        "'laptop' (the VM of that name is unmanaged): sand forks only its own"
    ) in proc.stdout, proc.stdout
    assert calls(rig, "stop", "clone") == []
    assert "try-1" not in rig.standin.instances()


def run_sand(rig: Rig, *args: str):  # type: ignore[no-untyped-def]
    """``sand ARGS`` in the rig (the manifest is ./sand.yaml there)."""
    import subprocess

    from tests.crash.killer import sand_argv

    return subprocess.run(
        sand_argv(*args), env=rig.env(), cwd=rig.root, capture_output=True, text=True,
        timeout=180, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_fork_apply_creates_the_forks_without_writing_the_manifest(tmp_path):
    """`sand fork --apply` (issue 29): the forks are created by an apply targeted at
    them, on the manifest with their entries added in memory; the file is not written,
    the entries are printed with what to do, and until they are added the next plan
    says which VMs are undeclared forks (to delete)."""
    rig = made(Rig(tmp_path))
    before = rig.manifest.read_bytes()
    rig.standin.clear_log()
    proc = run_sand(
        rig, "fork", "agent-1", "--count", "3", "--prefix", "try-", "--apply", "--auto-approve"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The plan and the apply's words on stderr: stdout is the entries alone, so that
    # `sand fork VM --apply >> sand.yaml` appends them and nothing else.
    assert '+ vm "try-1" (fork of agent-1 at apply time: stops agent-1 for the copy) {' in (
        proc.stderr
    )
    assert "Apply complete!" in proc.stderr
    entries = THREE_FORKS
    assert proc.stdout == entries, proc.stdout
    assert "NOT written to sand.yaml" in proc.stderr and "plans every fork" in proc.stderr
    assert rig.manifest.read_bytes() == before
    assert rig.vms() == ["agent-1", "try-1", "try-2", "try-3"]
    assert status(rig, "agent-1") == "Running"
    assert [c.split()[0] for c in source_calls(rig)] == ["stop", *["clone"] * 3, "start"]
    assert sidecar(rig, "try-2")["image"] == "fork:agent-1"
    # Not declared: the next plan would delete them, says what they are, and sweeps them
    # for unpushed work first as any delete (a stand-in has no guest to look into: then
    # it is held as holding work, blocked).
    plan = rig.sand("plan")
    assert "  # try-1 (laptop) is blocked: it would be destroyed" in plan.stdout, plan.stdout
    assert "a fork of agent-1 that no entry declares (made by `sand fork --apply`?)" in (
        plan.stdout
    )
    # Added as printed, they are the manifest's VMs like any other.
    rig.manifest.write_bytes(before + entries.encode())
    assert rig.sand("plan", "--detailed-exitcode").returncode == 0
