"""The guest's fork-identity step, run for real as root in a namespace of its own
(``identity_sandbox``: this machine's identity is never touched; issue 29, item 2):
two forks of one source get different machine-ids and SSH host keys, the fork's
name as hostname, and a second run changes nothing."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from sand.desired.fork import DesiredFork
from sand.provision.bundle import Bundle
from sand.provision.checks import ProvisionSpecError
from sand.provision.steps import fork_identity_step
from tests.provision.helpers import make_vm
from tests.provision.identity_sandbox import host_key, make_guest, require_namespaces
from tests.provision.identity_sandbox import run_step as run_identity_step

SCRIPT = Bundle().root / "fork-identity.sh"
SOURCE_ID = "0123456789abcdef0123456789abcdef"


@pytest.fixture(autouse=True)
def _root_and_namespaces() -> None:
    require_namespaces()


def source_copy(root: Path) -> Path:
    """The files a fork boots with: its source's, copied."""
    return make_guest(root, SOURCE_ID, "agent-1")


def run_step(guest: Path, name: str) -> subprocess.CompletedProcess[str]:
    vm = replace(make_vm(), name=name, fork=DesiredFork("agent-1"))
    return run_identity_step(guest, fork_identity_step(vm), SCRIPT)


def test_two_forks_of_one_source_are_machines_of_their_own(tmp_path: Path) -> None:
    source = source_copy(tmp_path / "source")
    forks = {}
    for name in ("try-1", "try-2"):
        guest = tmp_path / name
        shutil.copytree(source, guest)
        proc = run_step(guest, name)
        assert proc.returncode == 0, proc.stderr
        assert "sand:changed /etc/machine-id made anew" in proc.stdout
        forks[name] = guest
    ids = {name: (g / "machine-id").read_text().strip() for name, g in forks.items()}
    keys = {name: host_key(g) for name, g in forks.items()}
    assert len({SOURCE_ID, *ids.values()}) == 3
    assert all(len(i) == 32 for i in ids.values())
    assert len({host_key(source), *keys.values()}) == 3
    for name, guest in forks.items():
        assert (guest / "hostname").read_text() == f"{name}\n"
        assert (guest / "kernel-hostname").read_text().strip() == name
    assert (source / "machine-id").read_text().strip() == SOURCE_ID  # the source untouched


def test_a_second_run_changes_nothing(tmp_path: Path) -> None:
    guest = source_copy(tmp_path / "g")
    assert run_step(guest, "try-1").returncode == 0
    made = ((guest / "machine-id").read_text(), host_key(guest))
    proc = run_step(guest, "try-1")
    assert proc.returncode == 0, proc.stderr
    assert "sand:changed" not in proc.stdout
    assert ((guest / "machine-id").read_text(), host_key(guest)) == made


def test_a_name_no_hostname_can_take_is_refused_on_the_host() -> None:
    with pytest.raises(ProvisionSpecError):
        fork_identity_step(replace(make_vm(), name="bad name;", fork=DesiredFork("a")))
