"""The secrets stamp: the same on every host, changed by any value, revealing none."""

from __future__ import annotations

import hashlib
import time

from sand.desired.brokered import BrokerGrant
from sand.provision.secretcheck import secret_files
from sand.secrets import SecretValue, Stamper
from sand.secrets.stamp import is_stamp, project_salt
from tests.provision.helpers import make_vm, repo, secret

CANARY = "canary-stamp-61c0ffee"

VM = make_vm(
    secrets=(secret("API", "~/work", "API_KEY"),),
    repos=(repo("app", "https://git.test/app.git", "~/src/app", token="GIT"),),
)
VALUES = {"API": CANARY, "GIT": "git-token-1"}


def test_every_host_computes_the_same_stamp_from_the_same_values():
    # Two Stampers share nothing (as two hosts would not): same project, same values.
    first = Stamper("demo").stamp(VM, VALUES)
    second = Stamper("demo").stamp(VM, {k: SecretValue(k, v) for k, v in VALUES.items()})
    assert first == second
    assert is_stamp(first) and first.startswith("1-")


def test_the_stamp_changes_with_any_value_scope_env_name_vm_or_project():
    stamper = Stamper("demo")
    base = stamper.stamp(VM, VALUES)
    assert base != stamper.stamp(VM, {**VALUES, "API": CANARY + "x"})
    assert base != stamper.stamp(VM, {**VALUES, "GIT": "git-token-2"})
    moved = make_vm(secrets=(secret("API", "~/elsewhere", "API_KEY"),), repos=VM.repos)
    assert base != stamper.stamp(moved, VALUES)
    renamed = make_vm(secrets=(secret("API", "~/work", "OTHER"),), repos=VM.repos)
    assert base != stamper.stamp(renamed, VALUES)
    other_vm = make_vm(name="vm2", secrets=VM.secrets, repos=VM.repos)
    assert base != stamper.stamp(other_vm, VALUES)  # two VMs never show they share a value
    assert base != Stamper("other-project").stamp(VM, VALUES)
    assert project_salt("demo") != project_salt("other-project")


def test_a_vm_without_secrets_has_no_stamp():
    assert Stamper("demo").stamp(make_vm(), {}) == ""


def test_the_stamp_reveals_no_value_and_no_plain_hash_of_one():
    stamp = Stamper("demo").stamp(VM, VALUES)
    digest = stamp.split("-", 1)[1]
    for value in VALUES.values():
        assert value not in stamp
        for algo in ("sha256", "sha1", "md5", "sha512"):
            plain = hashlib.new(algo, value.encode()).hexdigest()
            assert digest not in plain and plain[:20] not in stamp
    assert len(digest) * 4 >= 64


def test_one_slow_kdf_per_distinct_value_not_per_vm():
    stamper = Stamper("demo")
    vms = [make_vm(name=f"vm{i}", secrets=VM.secrets, repos=VM.repos) for i in range(20)]
    start = time.perf_counter()
    for vm in vms:
        stamper.stamp(vm, VALUES)
    took = time.perf_counter() - start
    assert stamper.kdf_runs == 2  # API and GIT, whatever the number of VMs
    # Each run is deliberately slow (scrypt); 20 VMs cost two of them, not forty.
    one = time.perf_counter()
    Stamper("demo").stamp(make_vm(secrets=VM.secrets), {"API": CANARY})
    single = time.perf_counter() - one
    assert single > 0.005  # a slow KDF, not a plain hash
    assert took < single * 10


def test_the_guest_check_looks_for_exactly_the_files_secrets_sh_writes():
    files = secret_files(VM)
    assert len(files) == 2
    assert files[0].startswith("env/work-") and files[0].endswith(".sh")
    assert files[1].startswith("git/src-app-")


def test_a_rotated_brokered_secret_granted_by_secrets_changes_the_stamp():
    # Its value goes to the broker at a delivery: a new one must be delivered again.
    grant = BrokerGrant("API", (), (), https_hosts=("api.test",), env=(("~/work", "API"),))
    vm = make_vm(brokered=(grant,))
    stamper = Stamper("demo")
    assert stamper.stamp(vm, {"API": CANARY}) != stamper.stamp(vm, {"API": CANARY + "x"})
    assert stamper.stamp(vm, {"API": CANARY}) != ""
