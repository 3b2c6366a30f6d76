"""The guest's pool-identity step, run for real as root in a namespace of its own
(``identity_sandbox``; issue 41, item 4): a spare cloned from a generalized base got
a machine-id and host keys of its own at its first boot, so neither its provisioning
nor the claim that makes it a VM makes any anew (a claim writes its hostname only);
keys that are the base's, or on a machine whose base left no record, are made anew at
the spare's step, each spare its own, and a claim keeps those."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from sand.provision.bundle import Bundle
from sand.provision.checks import ProvisionSpecError
from sand.provision.steps import pool_identity_step, provision_steps
from tests.provision.helpers import make_vm
from tests.provision.identity_sandbox import host_key, make_guest, new_key, require_namespaces
from tests.provision.identity_sandbox import run_step as run_identity_step

SCRIPT = Bundle().root / "pool-identity.sh"
FIRST_BOOT_ID = "5f0c8a1e2b3d4c5e6f708192a3b4c5d6"


@pytest.fixture(autouse=True)
def _root_and_namespaces() -> None:
    require_namespaces()


def run_step(guest: Path, name: str) -> subprocess.CompletedProcess[str]:
    proc = run_identity_step(guest, pool_identity_step(replace(make_vm(), name=name)), SCRIPT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def made(proc: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in proc.stdout.splitlines() if line.startswith("sand:changed")]


def key_files(guest: Path) -> dict[str, str]:
    """Every host key file (the private ones too) by name, as a digest of its bytes."""
    return {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted((guest / "ssh").glob("ssh_host_*"))
    }


def spare_of_base(root: Path, base_keys: list[str], machine_id: str = FIRST_BOOT_ID) -> Path:
    """A spare as its first boot left it: its own ed25519 key, its own machine-id, the
    base's record of the keys the base kept."""
    guest = make_guest(root, machine_id, "localhost")
    (guest / "sand" / "base-host-keys").write_text("".join(f"{k}\n" for k in base_keys))
    return guest


def test_a_claim_keeps_the_spares_own_machine_id_and_host_keys(tmp_path: Path) -> None:
    base_key = new_key(tmp_path / "base" / "ssh_host_ed25519_key")
    spare = spare_of_base(tmp_path / "spare", [base_key])
    keys = key_files(spare)
    assert made(run_step(spare, "agents-spare-1")) == ["sand:changed hostname agents-spare-1"]
    claim = run_step(spare, "agent-a")
    assert made(claim) == ["sand:changed hostname agent-a"]
    assert "ssh-keygen" not in claim.stderr
    assert key_files(spare) == keys  # not one byte of a key written
    assert (spare / "machine-id").read_text() == FIRST_BOOT_ID + "\n"
    assert (spare / "hostname").read_text() == "agent-a\n"
    assert (spare / "kernel-hostname").read_text().strip() == "agent-a"
    assert made(run_step(spare, "agent-a")) == []


def test_spares_with_the_bases_keys_get_their_own_at_the_spares_step(tmp_path: Path) -> None:
    """A base whose guest has no cloud-init keeps its keys: each clone boots with them
    (and an empty machine-id). Each spare's own step makes them its own, one spare's
    unlike another's; the claim then makes none."""
    base = make_guest(tmp_path / "base", "", "localhost")
    base_key = host_key(base)
    spares = {}
    for name in ("agents-spare-1", "agents-spare-2"):
        guest = tmp_path / name
        shutil.copytree(base, guest)
        (guest / "sand" / "base-host-keys").write_text(base_key + "\n")
        said = made(run_step(guest, name))
        assert "sand:changed SSH host keys made anew" in said
        assert "sand:changed /etc/machine-id made anew" in said
        spares[name] = guest
    ids = {(g / "machine-id").read_text().strip() for g in spares.values()}
    keys = {host_key(g) for g in spares.values()}
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)
    assert len(keys) == 2 and base_key not in keys
    spare = spares["agents-spare-1"]
    before = (key_files(spare), (spare / "machine-id").read_text())
    assert made(run_step(spare, "agent-a")) == ["sand:changed hostname agent-a"]
    assert (key_files(spare), (spare / "machine-id").read_text()) == before


def test_a_spare_whose_base_left_no_record_makes_its_keys_once(tmp_path: Path) -> None:
    """No record of the base's keys (a base generalized by an older sand, a template of
    the person's own): its keys cannot be told from the base's, so the spare's step
    makes them anew, and vouches for them; the claim keeps them."""
    spare = make_guest(tmp_path / "spare", FIRST_BOOT_ID, "localhost")
    first = host_key(spare)
    assert "sand:changed SSH host keys made anew" in made(run_step(spare, "agents-spare-1"))
    assert host_key(spare) != first
    keys, machine_id = key_files(spare), (spare / "machine-id").read_text()
    assert machine_id != FIRST_BOOT_ID + "\n"
    assert made(run_step(spare, "agent-a")) == ["sand:changed hostname agent-a"]
    assert (key_files(spare), (spare / "machine-id").read_text()) == (keys, machine_id)


def test_a_copied_record_vouches_only_for_the_keys_it_names(tmp_path: Path) -> None:
    """A disk copy carries the record, but a machine whose keys are no longer the ones
    it names (a fork's, made anew) does not take them for its own."""
    spare = make_guest(tmp_path / "spare", FIRST_BOOT_ID, "localhost")
    run_step(spare, "agents-spare-1")
    new_key(spare / "ssh" / "ssh_host_ed25519_key.tmp")
    for suffix in ("", ".pub"):
        (spare / "ssh" / f"ssh_host_ed25519_key.tmp{suffix}").replace(
            spare / "ssh" / f"ssh_host_ed25519_key{suffix}"
        )
    stranger = host_key(spare)
    assert "sand:changed SSH host keys made anew" in made(run_step(spare, "agent-a"))
    assert host_key(spare) != stranger


def test_pool_vms_run_it_and_a_name_no_hostname_can_take_is_refused() -> None:
    spare = replace(make_vm(), name="agents-spare-1", pool="agents", spare=True)
    claim = replace(make_vm(), name="agent-a", pool="agents")
    for vm in (spare, claim):
        steps = [s for s in provision_steps(vm, {}) if s.name.endswith("identity")]
        assert [(s.name, s.argv[-1]) for s in steps] == [("pool-identity", vm.name)]
    assert not [s for s in provision_steps(make_vm(), {}) if s.name.endswith("identity")]
    with pytest.raises(ProvisionSpecError):
        pool_identity_step(replace(make_vm(), name="bad name;"))
