"""Step digests and the driver's protocol, host side (the guest side: e2e/test_provision_ledger)."""

from __future__ import annotations

import shutil

import pytest

from sand.desired.spec import DesiredBase, ImageStep, MachineContent
from sand.provision.bundle import BUNDLE_DIR, MACHINE_SCRIPTS, Bundle
from sand.provision.driver import DRIVER, MAGIC, plan_run, read_frames
from sand.provision.steps import (
    MACHINE,
    base_build_steps,
    provision_steps,
    step_digest,
)
from tests.provision.helpers import make_vm, secret

VALUE = "ledger-unit-canary-77aa"


def _digests(vm, bundle=None, values=None):
    values = values if values is not None else {"API": VALUE}
    steps = provision_steps(vm, values, agent_source=None)
    b = bundle or Bundle()
    return {s.name: step_digest(s, b, vm.user) for s in steps}


def _vm(**kw):
    return make_vm(secrets=(secret("API", "~/work", "API_KEY"),), timezone="Etc/UTC", **kw)


def test_equal_inputs_give_equal_digests_and_each_input_moves_only_its_step():
    base = _digests(_vm())
    assert base == _digests(_vm())
    more = _digests(_vm(packages=("jq",)))
    assert {n for n in base if base[n] != more[n]} == {"packages"}
    docker = _digests(_vm(docker=True))
    assert {n for n in base if base[n] != docker[n]} == {"toolchain"}
    other_user = _digests(_vm(user="dev"))
    # Every step that names the user or runs as the user.
    assert {n for n in base if base[n] != other_user[n]} == {
        "user", "toolchain", "agents", "home", "secrets", "repos",
    }  # fmt: skip
    rotated = _digests(_vm(), values={"API": VALUE + "x"})
    assert {n for n in base if base[n] != rotated[n]} == {"secrets"}


def test_editing_a_script_moves_only_the_steps_that_run_it(tmp_path):
    edited = tmp_path / "bundle"
    shutil.copytree(BUNDLE_DIR, edited)
    (edited / "toolchain.sh").write_text((edited / "toolchain.sh").read_text() + "\n# edit\n")
    before, after = _digests(_vm()), _digests(_vm(), bundle=Bundle(edited))
    assert {n for n in before if before[n] != after[n]} == {"toolchain"}
    (edited / "lib.sh").write_text((edited / "lib.sh").read_text() + "\n# edit\n")
    shared = _digests(_vm(), bundle=Bundle(edited))
    assert {n for n in before if before[n] != shared[n]} == set(before)  # every step sources it


def test_the_secrets_step_is_recorded_on_tmpfs_only_and_its_digest_never_logged():
    vm = _vm()
    steps = provision_steps(vm, {"API": VALUE})
    run = plan_run("vm:vm1", vm.user, Bundle(), steps)
    secrets = next(p for p in run.steps if p.step.name == "secrets")
    assert secrets.step.ledger == "tmpfs"
    header = run.header()
    assert VALUE.encode() not in header  # values only ever in payloads
    fields = header.split(b"\0")
    at = fields.index(b"secrets")
    assert fields[at + 2] == b"tmpfs"
    # The driver writes a tmpfs step's digest to its (disk) step log as "-".
    assert 'if [ "${stores[$1]}" = disk ]' in DRIVER


def test_payloads_carry_only_what_the_guest_asked_for():
    vm = _vm(packages=("jq",))
    run = plan_run("vm:vm1", vm.user, Bundle(), provision_steps(vm, {"API": VALUE}))
    bundle, needed = run.needed(f"sand:need:{run.nonce} packages".encode())
    assert (bundle, needed) == (False, ["packages"])
    body = run.payloads(bundle, needed)
    assert b"jq\0" in body and VALUE.encode() not in body
    assert run.payloads(*run.needed(f"sand:need:{run.nonce}".encode())) == b""
    with_bundle = run.payloads(*run.needed(f"sand:need:{run.nonce} bundle".encode()))
    assert with_bundle.startswith(f"{len(Bundle().tar)}\0".encode())
    # A line of another run, or a step this run does not have, is refused.
    with pytest.raises(ValueError):
        run.needed(b"sand:need:0000000000000000 packages")
    with pytest.raises(ValueError):
        run.needed(f"sand:need:{run.nonce} rm-rf".encode())


def test_frames_are_read_only_with_this_runs_nonce():
    nonce = "a" * 32
    text = "\n".join(
        [
            f"sand:step:{nonce} skip user",
            f"sand:step:{nonce} run packages",
            "sand:changed packages jq",
            "sand:step:" + "b" * 32 + " done packages 0 1 2",  # forged by a step's output
            f"sand:step:{nonce} done packages 0 10.5 12.0",
            f"sand:step:{nonce} run home",
            "half way",
        ]
    )
    skip, packages, home = read_frames(text, nonce)
    assert (skip.name, skip.ran) == ("user", False)
    assert (packages.name, packages.status, packages.seconds) == ("packages", 0, 1.5)
    assert "sand:changed packages jq" in packages.output
    assert (home.name, home.status) == ("home", None)  # began, never ended: cut off


def test_a_golden_vm_runs_its_own_steps_only_and_a_base_its_machine_steps():
    content = MachineContent(
        "claude", ("jq",), ("claude", "codex"), True, (ImageStep("x", "true"),)
    )
    base = DesiredBase("demo", "laptop", "wb", True, "debian-12", content)
    vm = _vm(base=base, packages=("ripgrep",), agents=("claude",))
    names = [s.name for s in provision_steps(vm, {"API": VALUE})]
    assert names == ["user", "egress", "locale", "vm-packages", "home", "secrets", "repos"]
    built = base_build_steps(base)
    assert [s.name for s in built] == [
        "user", "packages", "toolchain", "agents", "memory", "image-x", "generalize",
    ]  # fmt: skip
    assert {s.name for s in built if s.scope == MACHINE} == {
        "packages", "toolchain", "agents", "memory", "image-x",
    }  # fmt: skip
    # The image's own step text is stdin, never argv.
    image_step = next(s for s in built if s.name == "image-x")
    assert image_step.stdin == b"true" and "true" not in image_step.argv[2:]


def test_a_derived_vm_and_its_base_share_their_machine_digests():
    vm = _vm(packages=("jq",))
    content = MachineContent(vm.user, vm.packages, vm.agents, vm.docker)
    base = DesiredBase("demo", "laptop", "auto-x", False, vm.image, content)
    bundle = Bundle()
    of_vm = {s.name: step_digest(s, bundle, vm.user) for s in provision_steps(vm, {"API": "v"})}
    of_base = {s.name: step_digest(s, bundle, vm.user) for s in base_build_steps(base)}
    for name in ("packages", "toolchain", "agents"):
        assert of_vm[name] == of_base[name]  # a clone of the base skips them by its ledger


def test_the_machine_scripts_name_real_bundle_files_and_the_header_is_versioned():
    names = {rel for rel, _, _ in Bundle().files}
    assert set(MACHINE_SCRIPTS) <= names
    run = plan_run("base:wb", "claude", Bundle(), [])
    assert run.header().startswith(MAGIC.encode() + b"\0")
    with pytest.raises(ValueError):
        plan_run("base wb; rm", "claude", Bundle(), [])
