"""One writer per project across hosts, on the far side: two ``sand sync`` processes
with state dirs (and PVE tokens) of their own follow one repository and drive one
fakepve, as two hosts would. Who wrote what is read from fakepve's request log, each
request under the token that sent it; the lease itself from fakepve's lease object."""

from __future__ import annotations

import itertools
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.backends.lease import LeaseRecord, grace
from sand.backends.proxmox.lease import parse_record
from tests.cli.helpers import Sand
from tests.cli.sync_rig import (
    OTHER_HOST,
    Repo,
    SyncProcess,
    can_be_another_host,
    https_git,
    pin_proxmox,
    private_file,
)
from tests.fakepve_rig.rig import FakePveRig
from tests.required import require
from tests.rig.gitserver import GitServer

GIT_TOKEN = "git-token-for-two-hosts"


def team_manifest(rig: FakePveRig, vms: list[dict[str, object]]) -> dict[str, object]:
    data = rig.manifest(vms)
    backend = data["backends"]["pve"]  # type: ignore[index]
    backend["token_file"] = "pve.token"  # each host has its own, in its --host-dir
    backend["identity"] = "id_ed25519"
    backend["ca_file"] = "pve-ca.pem"
    return data


class Host:
    """One machine running ``sand sync``: its own state, host dir and PVE token."""

    def __init__(self, tmp: Path, rig: FakePveRig, name: str) -> None:
        self.name = name
        self.token_id = f"sand@pve!{name}"
        self.dir = tmp / name
        home = self.dir / "host"
        home.mkdir(parents=True)
        shutil.copy(rig.add_token(self.token_id), home / "pve.token")
        for key in (rig.identity, rig.identity.with_name(rig.identity.name + ".pub")):
            shutil.copy(key, home / key.name)
        shutil.copy(rig.ca_file, home / "pve-ca.pem")
        pin_proxmox(home, rig.host, rig.port)
        self.home = home
        self.git_token = private_file(self.dir / "git.token", GIT_TOKEN)
        self.sync: SyncProcess | None = None

    def start(
        self, repo: Repo, *args: str, ttl: float = 60.0, wrap: tuple[str, ...] = ()
    ) -> SyncProcess:
        self.sync = SyncProcess(
            self.dir,
            "--repo", repo.url,
            "--token-file", str(self.git_token),
            "--host-dir", str(self.home),
            "--interval", "0.5",
            *args,
            env={"SAND_LEASE_TTL": str(ttl)},
            wrap=wrap,
        )  # fmt: skip
        return self.sync


@pytest.fixture
def git(fakepve_rig_pki, monkeypatch) -> Iterator[GitServer]:
    with https_git(GIT_TOKEN, fakepve_rig_pki, monkeypatch) as server:
        yield server


@pytest.fixture
def hosts(tmp_path, fakepve_server):
    made = [Host(tmp_path, fakepve_server, name) for name in ("laptop", "runner")]
    yield made
    for host in made:
        if host.sync is not None:
            host.sync.stop()


def lease(rig: FakePveRig) -> tuple[int, LeaseRecord | None]:
    (vm,) = rig.lease_vms()
    return vm.vmid, parse_record(rig.run(lambda: vm.config.get("description")))


def writes(rig: FakePveRig) -> list:
    """Successful mutating requests, in the order they were answered."""
    done = [r for r in rig.log if r.method in ("POST", "PUT", "DELETE") and r.status == 200]
    return sorted(done, key=lambda r: r.at)


def assert_one_writer_at_a_time(
    rig: FakePveRig, lease_vmid: int, *, killed: str = "", ttl: float = 0.0
) -> None:
    """Whenever the writer changes, the one coming first writes the lease (its take),
    and the one leaving last wrote it (its release), or, if it was ``killed``, its
    lease had expired (its last write of the lease, plus ``ttl``) by then: no write of
    one falls inside another's holding."""
    lease_path = f"/nodes/pve1/qemu/{lease_vmid}/config"
    log = writes(rig)

    def of_lease(r) -> bool:  # type: ignore[no-untyped-def]
        return (r.method, r.path) == ("PUT", lease_path)

    for n, (before, after) in enumerate(itertools.pairwise(log)):
        if before.token == after.token:
            continue
        assert of_lease(after), (before, after)
        if before.token == killed:
            renewed = max(r.at for r in log[: n + 1] if r.token == killed and of_lease(r))
            assert after.at >= renewed + ttl, (before, after)
        else:
            assert of_lease(before), (before, after)


@pytest.mark.fakepve_rig(time_scale=0.05)
def test_two_syncs_take_turns_and_make_every_vm_once(fakepve_server, git, hosts) -> None:
    rig = fakepve_server
    repo = Repo(git, "fleet", team_manifest(rig, [{"name": "t-1"}]))
    laptop, runner = hosts
    first = laptop.start(repo)
    first.wait_for(lambda: first.said("applied (converged)"))
    second = runner.start(repo)
    second.wait_for(lambda: second.said("No changes."))
    rig.set_task_secs("qmclone", 10)  # 0.5 s each: the two runs overlap in time

    wanted = [{"name": f"t-{i}"} for i in range(1, 5)]
    repo.push(team_manifest(rig, wanted), "three more")
    for sync in (first, second):
        sync.wait_for(lambda s=sync: s.said("applied (converged)") and len(s.applying()) >= 1)
    for sync in (first, second):
        sync.wait_for(lambda s=sync: s.text().count("applied (converged)") >= 2, timeout=90)

    names = sorted(vm.name for vm in rig.vms())
    assert names == ["t-1", "t-2", "t-3", "t-4"]  # none lost, none twice
    clones = [r for r in writes(rig) if r.path.endswith("/clone")]
    assert len(clones) == 4
    assert {r.token for r in writes(rig)} <= {laptop.token_id, runner.token_id}
    vmid, record = lease(rig)
    assert record is not None and not record.held()
    assert_one_writer_at_a_time(rig, vmid)
    # The one that came second planned again under the lease and found nothing to do.
    assert any(s.said("planned again") for s in (first, second))


@pytest.mark.real_clock  # the lease expiry between two syncs
@pytest.mark.fakepve_rig(time_scale=0.05)
def test_a_killed_holder_is_taken_over_once_its_lease_expires(fakepve_server, git, hosts) -> None:
    # Each sync in a pid namespace of its own, as on two hosts: nobody can tell the
    # killed one is dead, only that its lease is no longer renewed.
    require(can_be_another_host(), "needs root and unshare for a pid namespace")
    rig = fakepve_server
    ttl = 3.0
    repo = Repo(git, "fleet", team_manifest(rig, [{"name": "k-1"}]))
    laptop, runner = hosts
    first = laptop.start(repo, ttl=ttl, wrap=OTHER_HOST)
    first.wait_for(lambda: first.said("applied (converged)"))
    second = runner.start(repo, ttl=ttl, wrap=OTHER_HOST)
    second.wait_for(lambda: second.said("No changes."))
    rig.set_task_secs("qmstart", 200)  # 10 s: the VM is made, marked, and starting

    repo.push(team_manifest(rig, [{"name": "k-1"}, {"name": "k-2"}]), "one more")
    deadline = time.monotonic() + 60
    while not (rig.vms_named("k-2") and "sand-" in str(rig.vms_named("k-2")[0].config.get("tags"))):
        assert time.monotonic() < deadline, "k-2 was never made"
        time.sleep(0.05)
    vmid, record = lease(rig)
    assert record is not None and record.held()
    # Who holds it: the token of the last write to the lease (the other never writes it
    # while it is held).
    lease_path = f"/nodes/pve1/qemu/{vmid}/config"
    (last,) = [r for r in writes(rig) if r.path == lease_path][-1:]
    holder, other = (laptop, runner) if last.token == laptop.token_id else (runner, laptop)
    assert holder.sync is not None and other.sync is not None
    holder.sync.kill()
    killed = time.time()

    # `sand apply` from a third place meanwhile: refused, naming who holds the project.
    sand = Sand(laptop.dir)
    sand.write(team_manifest(rig, [{"name": "k-1"}, {"name": "k-2"}]))
    shutil.copy(laptop.home / "pve.token", laptop.dir / "pve.token")
    shutil.copy(laptop.home / "id_ed25519", laptop.dir / "id_ed25519")
    shutil.copy(laptop.home / "pve-ca.pem", laptop.dir / "pve-ca.pem")
    elsewhere = {"SAND_STATE_DIR": str(laptop.dir / "s3")}
    refused = sand.run("apply", "--auto-approve", env=elsewhere)
    assert refused.returncode == 1
    who = f"{record.holder.host} (pid {record.holder.pid}, revision {repo.head()[:12]})"
    assert f"project demo is being applied by {who}" in refused.stderr
    status = sand.run("status", env=elsewhere)
    assert f"Lease on pve: being applied by {who}" in status.stdout

    def taken_over() -> bool:
        now = lease(rig)[1]
        return now is not None and now.held() and now.holder.nonce != record.holder.nonce

    other.sync.wait_for(taken_over)
    took_over = time.time()
    assert killed + ttl - 1.0 <= took_over <= killed + ttl + grace(ttl) + 10.0

    # The killed run's start goes on on the cluster; once it ends, the VM converges.
    # Its seconds left are not what this test is about: they pass at once.
    rig.set_task_secs("qmstart", 0)
    rig.fast_forward()

    def converged() -> bool:
        (vm,) = rig.vms_named("k-2")
        tags = str(vm.config.get("tags") or "")
        return vm.status == "running" and f"sand-{vm.vmid}-new" not in tags

    other.sync.wait_for(converged, timeout=90)
    assert sorted(vm.name for vm in rig.vms()) == ["k-1", "k-2"]  # no duplicate, none lost
    assert len(rig.vms_named("k-2")) == 1
    assert_one_writer_at_a_time(rig, vmid, killed=holder.token_id, ttl=ttl)
