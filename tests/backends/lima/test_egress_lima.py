"""An egress policy on local Lima, on the limactl stand-in running a QEMU as Lima's driver
does (``$QEMU_SYSTEM_X86_64`` or ``qemu-system-x86_64``; its ``-netdev user`` line): a
VM with a deny policy is started through sand's QEMU shim from its first start (the
running QEMU's command line restricts net0 and forwards the proxy with the VM's policy
file), a start by hand without the shim is drift that apply restarts closed, and
dropping the policy restarts the VM open."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.egress.policy import read_policy
from sand.egress.shim import PROXY_MODULE
from tests.backends.lima.test_fork_lima import calls
from tests.crash.test_crash_lima import Rig

CLOSED = "  - name: a\n    egress: {domains: [github.com], cidrs: [10.20.0.0/16]}\n  - name: b\n"


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    made.standin.run_qemu()
    yield made
    made.standin.stop_qemus()


def qemu_argv(rig: Rig, name: str) -> list[str]:
    """The running QEMU of ``name``, as /proc shows it."""
    pid = int((rig.standin.lima_home / name / "qemu.pid").read_text())
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def net0(rig: Rig, name: str) -> str:
    argv = qemu_argv(rig, name)
    return argv[argv.index("-netdev") + 1]


def starts(rig: Rig, name: str) -> list[dict[str, str]]:
    """The QEMU variables of each ``limactl start NAME`` since the log was cleared."""
    return [
        inv.qemu_env or {}
        for inv in rig.standin.invocations()
        if inv.command == "start" and name in inv.argv
    ]


def limactl(rig: Rig, *args: str) -> None:
    """A limactl call by hand: the environment of a person's shell, no shim."""
    env = {**rig.standin.env()}
    env["LIMA_HOME"] = str(rig.standin.lima_home)
    done = subprocess.run(
        [str(rig.standin.executable), "--tty=false", *args], env=env, capture_output=True
    )
    assert done.returncode == 0, done.stderr.decode()


def test_a_vm_with_a_deny_policy_is_started_restricted_from_its_first_start(rig: Rig):
    rig.write(CLOSED)
    rig.standin.clear_log()
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rig.vms() == ["a", "b"]
    policy_path = rig.standin.lima_home / "a" / "sand-egress.json"
    policy = read_policy(policy_path)
    assert (policy.vm, policy.domains, policy.cidrs, policy.ports) == (
        "a",
        ("github.com",),
        ("10.20.0.0/16",),
        (443,),
    )
    # a's only start ran QEMU through the shim; b's, without a policy, as ever.
    (first,) = starts(rig, "a")
    assert first["QEMU_SYSTEM_X86_64"] == str(rig.standin.lima_home / "a" / "sand-qemu-x86_64")
    assert starts(rig, "b") == [{}]
    option = net0(rig, "a").split(",")
    assert option[0:2] == ["user", "id=net0"] and "restrict=on" in option
    assert f"-m {PROXY_MODULE} {policy_path}" in net0(rig, "a")
    assert "hostfwd=tcp:127.0.0.1:" in net0(rig, "a")  # Lima's SSH forward kept
    assert "restrict=on" not in net0(rig, "b")
    assert rig.sand("plan", "--detailed-exitcode").returncode == 0


def test_a_start_by_hand_without_the_shim_is_drift_apply_restarts_it_closed(rig: Rig):
    rig.write(CLOSED)
    assert rig.sand("apply", "--auto-approve").returncode == 0
    limactl(rig, "stop", "a")
    limactl(rig, "start", "a")  # lima-vm/lima#5464's kind of hole: it boots open
    assert "restrict=on" not in net0(rig, "a")
    plan = rig.sand("plan", "--detailed-exitcode")
    assert plan.returncode == 2, plan.stdout + plan.stderr
    assert '~ egress = "allow" -> "deny except 1 domain, 1 cidr on port 443 #' in plan.stdout
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "restrict=on" in net0(rig, "a").split(",")
    assert rig.sand("plan", "--detailed-exitcode").returncode == 0


def test_dropping_the_policy_restarts_the_vm_open(rig: Rig):
    rig.write(CLOSED)
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.write("  - name: a\n  - name: b\n")
    plan = rig.sand("plan")
    assert '~ egress = "deny except 1 domain, 1 cidr on port 443 #' in plan.stdout, plan.stdout
    assert '-> "allow"' in plan.stdout
    assert rig.sand("apply", "--auto-approve").returncode == 0
    assert not (rig.standin.lima_home / "a" / "sand-egress.json").exists()
    assert "restrict=on" not in net0(rig, "a")
    assert rig.sand("plan", "--detailed-exitcode").returncode == 0


def test_a_changed_policy_is_written_and_the_vm_restarted_through_the_shim(rig: Rig):
    rig.write(CLOSED)
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.write(CLOSED.replace("cidrs: [10.20.0.0/16]", "cidrs: [10.20.0.0/16], ports: [22, 443]"))
    rig.standin.clear_log()
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls(rig, "stop", "start", "create", "delete") == ["stop a", "start a"]
    assert read_policy(rig.standin.lima_home / "a" / "sand-egress.json").ports == (22, 443)
    assert "restrict=on" in net0(rig, "a").split(",")
    assert rig.sand("plan", "--detailed-exitcode").returncode == 0


def test_plan_json_shows_a_deny_policy_as_a_plain_create(rig: Rig):
    rig.write("  - name: a\n    egress: {domains: [github.com]}\n")
    document = json.loads(rig.sand("plan", "--json").stdout)
    (change,) = document["changes"]
    assert (change["action"], change.get("blockers") or []) == ("create", [])
    assert change["desired"]["egress"].startswith("deny except 1 domain")


def test_an_allow_policy_is_made_as_any_vm(rig: Rig):
    rig.write("  - name: a\n    egress: {policy: allow}\n")
    proc = rig.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rig.vms() == ["a"]
    assert "restrict=on" not in net0(rig, "a")


def test_a_replacement_is_made_closed_and_keeps_the_vms_denial_log(rig: Rig):
    """A replacement is made under a temporary instance name, then renamed: closed from
    its first start, restarted after the rename through the shim, its denials the VM's."""
    rig.write(CLOSED)
    assert rig.sand("apply", "--auto-approve").returncode == 0
    rig.write(CLOSED.replace("  - name: a\n", "  - name: a\n    image: debian-13\n"))
    proc = rig.sand("apply", "--auto-approve", "--allow-data-loss")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    policy_path = rig.standin.lima_home / "a" / "sand-egress.json"
    assert Path(read_policy(policy_path).denials).name == "laptop.a.denied.jsonl"
    assert f"-m {PROXY_MODULE} {policy_path}" in net0(rig, "a")
    assert rig.sand("plan", "--detailed-exitcode").returncode == 0
