"""The secrets stamp in the Lima sidecar, the host agent's start as the boot time, and
the guest check for what the listing cannot see (a reboot inside the guest)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import asyncssh
import pytest

from sand.backends.factory import make_backends
from sand.backends.lima import LimaBackend
from sand.manifest import load_manifest
from sand.observed import SecretsRecord
from sand.plan import Action, GuestAction, make_plan
from sand.project import desired_from
from sand.secrets import Stamper
from sand.state.journal import Journal
from tests.backends.lima.conftest import desired
from tests.limactl_standin import StandIn

STAMP = "1-" + "0123456789abcdef0123"
HOUR = 3600


def sidecar(standin: StandIn, name: str) -> dict[str, object]:
    return json.loads((standin.instance_dir(name) / "sand-marker.json").read_text())


def started_an_hour_ago(standin: StandIn, name: str) -> None:
    pid = standin.instance_dir(name) / "ha.pid"
    then = time.time() - HOUR
    os.utime(pid, (then, then))


async def test_the_stamp_lives_in_the_sidecar_and_survives_marks_without_delivery(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    state = desired("  - name: vm1\n  - name: vm2\n")
    await backend.observe(state.vms)
    vm1, vm2 = state.vms
    made = await backend.create(vm1, journal)
    await backend.mark_converged(vm1, made, SecretsRecord(STAMP, 1_700_000_000))
    await backend.mark_converged(vm2, await backend.create(vm2, journal))
    assert (sidecar(standin, "vm1")["secrets"], sidecar(standin, "vm1")["secrets_at"]) == (
        STAMP,
        1_700_000_000,
    )
    assert "secrets" not in sidecar(standin, "vm2")

    obs = await backend.observe(state.vms)
    assert obs.requests == 1 and not obs.reboots_visible
    seen = {vm.name: vm for vm in obs.vms}
    assert seen["vm1"].marker is not None
    assert (seen["vm1"].marker.secrets, seen["vm1"].marker.secrets_at) == (STAMP, 1_700_000_000)
    assert seen["vm2"].marker is not None and seen["vm2"].marker.secrets == ""

    await backend.mark_converged(vm1, seen["vm1"])  # nothing delivered: keep the stamp
    assert sidecar(standin, "vm1")["secrets"] == STAMP
    await backend.mark_converged(vm1, seen["vm1"], SecretsRecord("", 1_700_000_100))
    assert "secrets" not in sidecar(standin, "vm1")


async def test_a_restart_behind_sands_back_shows_as_a_boot_after_the_delivery(
    standin: StandIn, backend: LimaBackend, journal: Journal
) -> None:
    state = desired("  - name: vm1\n  - name: vm2\n")
    await backend.observe(state.vms)
    delivered = int(time.time()) - HOUR // 2
    for vm in state.vms:
        await backend.mark_converged(
            vm, await backend.create(vm, journal), SecretsRecord(STAMP, delivered)
        )
        started_an_hour_ago(standin, vm.name)

    obs = await backend.observe(state.vms)
    booted = {vm.name: vm.booted_at for vm in obs.vms}
    assert all(b is not None and abs(b - (time.time() - HOUR)) < 5 for b in booted.values())
    stamps = {vm.name: STAMP for vm in state.vms}
    policies = {"laptop": backend.capabilities}
    plan = make_plan(state, {"laptop": obs}, policies, secret_stamps=stamps)
    assert not plan.has_changes

    assert standin.run("stop", "vm2").returncode == 0  # a person restarts it with limactl
    assert standin.run("start", "vm2").returncode == 0
    obs = await backend.observe(state.vms)
    plan = make_plan(state, {"laptop": obs}, policies, secret_stamps=stamps)
    changes = {c.vm: c for c in plan.changes}
    assert changes["vm1"].action is Action.NOOP and not changes["vm1"].acts
    assert changes["vm2"].action is Action.NOOP and changes["vm2"].guest is GuestAction.SECRETS
    assert (
        changes["vm2"]
        .reasons[0]
        .startswith("secrets lost (guest rebooted after their delivery at ")
    )

    assert standin.run("stop", "vm1").returncode == 0
    stopped = {vm.name: vm for vm in (await backend.observe(state.vms)).vms}["vm1"]
    assert stopped.booted_at is None  # no host agent, no ha.pid


MANIFEST = """\
apiVersion: sand/v1
project: limasecrets
backends:
  laptop: {type: lima, lima_home: ./lima}
defaults: {image: debian-12, disk: 20GiB, memory: 2GiB}
secrets:
  NPM_TOKEN:
    from: {env: SAND_TEST_NPM}
vms:
  - name: dev-1
    secrets: [{name: NPM_TOKEN, scope: ~/src}]
  - name: plain
"""
CANARY = "lima-canary-0b7e-never-in-a-sidecar"


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[StandIn, Path]:
    """dev-1 and plain as an apply that delivered CANARY half an hour ago leaves them."""
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    standin.configure(require_tty_false=True, host_user="claude")
    # dev-1's SSH endpoint: a real key, and a port nothing listens on (a guest that hung).
    key = asyncssh.generate_private_key("ssh-ed25519")
    key.write_private_key(str(tmp_path / "id_ed25519"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    standin.back_with_guest(
        "dev-1", address="127.0.0.1", port=port, identity=str(tmp_path / "id_ed25519")
    )
    manifest = tmp_path / "sand.yaml"
    manifest.write_text(MANIFEST)
    monkeypatch.setenv("PATH", standin.path)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "setup-state"))
    loaded = load_manifest(manifest)
    state = desired_from(loaded)
    stamper = Stamper(state.project)

    async def run() -> None:
        backend = make_backends(
            loaded.manifest.backends, loaded.manifest.project, loaded.directory
        )["laptop"]
        try:
            await backend.observe(state.vms)
            for vm in state.vms:
                made = await backend.create(vm, Journal(tmp_path / "setup-journal.jsonl"))
                values = {"NPM_TOKEN": CANARY} if vm.secrets else {}
                record = SecretsRecord(stamper.stamp(vm, values), int(time.time()) - HOUR // 2)
                await backend.mark_converged(vm, made, record)
        finally:
            await backend.close()

    asyncio.run(run())
    for name in ("dev-1", "plain"):
        started_an_hour_ago(standin, name)
    return standin, manifest


def sand(standin: StandIn, manifest: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **standin.env(),
        "SAND_STATE_DIR": str(manifest.parent / "fresh-state"),
        "SAND_TEST_NPM": CANARY,
        "NO_COLOR": "1",
    }
    env.pop("LIMA_HOME")
    return subprocess.run(
        [sys.executable, "-m", "sand", *args, str(manifest)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=manifest.parent,
        check=False,
    )


@pytest.mark.sand_time_scale(0.01)  # the refused SSH's backoff is not the subject
def test_an_unreachable_guest_is_a_warning_not_a_change(fleet) -> None:
    standin, manifest = fleet
    # The stand-in's instances have no guest behind them: the check cannot connect.
    started = time.monotonic()
    proc = sand(standin, manifest, "plan", "--detailed-exitcode")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No changes." in proc.stdout
    assert "Warning: VM dev-1: could not check that its secrets are still on the guest" in (
        proc.stdout
    )
    assert "Connection refused" in proc.stdout or "failed after" in proc.stdout
    assert "plain" not in proc.stdout  # no secrets: never checked
    assert time.monotonic() - started < 60
    for name in ("dev-1", "plain"):
        assert CANARY not in (standin.instance_dir(name) / "sand-marker.json").read_text()


def test_a_limactl_restart_plans_delivery_without_asking_the_guest(fleet) -> None:
    standin, manifest = fleet
    assert standin.run("stop", "dev-1").returncode == 0
    assert standin.run("start", "dev-1").returncode == 0
    proc = sand(standin, manifest, "plan", "--detailed-exitcode")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "# dev-1 (laptop" in proc.stdout
        and "secrets lost (guest rebooted after their delivery at " in proc.stdout
    )
    assert "could not check" not in proc.stdout  # known from the listing: no SSH attempted
    assert "# plain" not in proc.stdout
