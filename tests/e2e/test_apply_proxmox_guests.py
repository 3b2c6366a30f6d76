"""`sand apply` end to end on fakepve with real guests behind the VMs.

Each fakepve VM's guest agent reports the address of a real sshd in its own
network namespace (as a booting guest's agent would), so sand's whole path
runs for real: clone, configure, start, find the address by MAC, provision
over SSH, deliver scoped secrets and a repo token, record the marker.
The canary secret is hunted for everywhere it must never be.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time

import pytest

from tests.audit.helpers import audit_records, verify_host
from tests.cli.helpers import Sand
from tests.provision.e2e_helpers import out, root, scoped_env, stand_in_agents
from tests.rig.argv import ArgvWatch

pytestmark = pytest.mark.e2e

CANARY = "canary-4b1d-never-in-argv-logs-or-markers"
ROTATED = "canary-rotated-5e2f-also-secret"
# File systems that would bring a host directory into a guest.
NETWORK_FS = ("9p", "virtiofs", "fuse.sshfs", "nfs", "nfs4", "cifs", "smb3")


class AgentAnswers:
    """Plays the guest agents: each new VM of a name reports its guest's address."""

    def __init__(self, rig, guests: dict[str, object]) -> None:
        self.rig, self.guests = rig, guests
        self.answered: set[int] = set()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.is_set():
            for vm in self.rig.vms():
                guest = self.guests.get(vm.name)
                if guest is not None and vm.vmid not in self.answered and vm.config.get("net0"):
                    self.rig.set_agent_ip(vm.vmid, guest.address)
                    self.answered.add(vm.vmid)
            time.sleep(0.05)

    def __enter__(self) -> AgentAnswers:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def everything_under(path) -> str:
    chunks = []
    for top, _dirs, files in os.walk(path):
        for name in files:
            try:
                with open(os.path.join(top, name), "rb") as fh:
                    chunks.append(fh.read().decode(errors="replace"))
            except OSError:
                pass
    return "\n".join(chunks)


def test_apply_provisions_real_guests_and_never_leaks_the_secret(
    tmp_path, fakepve_server, netns_guest, git_server
):
    rig = fakepve_server
    guests = {"agent-1": netns_guest(), "agent-2": netns_guest()}
    identity = guests["agent-1"].client_key_path
    # Both guests must trust the one identity the backend offers.
    key = guests["agent-1"].client_public_key
    for guest in guests.values():
        home = f"/home/{guest.user}"
        guest.run_root(
            ["sh", "-c", f"cat >> {home}/.ssh/authorized_keys"], input=(key + "\n").encode()
        )
    repo_url = git_server.create_repo("app", {"README.md": "hello from the forge\n"})
    token_file = tmp_path / "git.token"
    token_file.write_text(git_server.token + "\n")
    token_file.chmod(0o600)

    sand = Sand(tmp_path)
    manifest = rig.manifest(
        [
            {
                "name": "agent-1",
                "repos": ["app"],
                "secrets": [{"name": "API_TOKEN", "scope": "~/work"}],
            },
            {"name": "agent-2"},
        ],
        defaults={"provision": True},
        identity=str(identity),
        # Each VM here has its own guest, made beforehand: no base is derived for the two
        # (golden bases: test_golden_bases_proxmox.py).
        derive_bases=False,
    )
    manifest["secrets"] = {
        "API_TOKEN": {"from": {"env": "SAND_TEST_API_TOKEN"}},
        "GIT_TOKEN": {"from": {"file": str(token_file)}},
    }
    manifest["repos"] = {"app": {"url": repo_url, "token": "GIT_TOKEN", "path": "~/src/app"}}
    sand.write(manifest)
    env = {
        "SAND_TEST_API_TOKEN": CANARY,
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
    }

    plan = sand.run("plan", env=env)
    assert plan.returncode == 0, plan.stderr
    with AgentAnswers(rig, guests), ArgvWatch(*guests.values(), host=True) as watch:
        proc = sand.run("--log-level", "debug", "apply", "--auto-approve", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert watch.samples > 10

    g1 = guests["agent-1"]
    assert scoped_env(g1, "~/work", "API_TOKEN") == CANARY
    assert not scoped_env(g1, "~", "API_TOKEN")
    assert "hello from the forge" in out(g1, "cat ~/src/app/README.md")
    assert "stand-in claude" in out(guests["agent-2"], "bash -lc 'claude --version'")

    # No mount at all: the VMs' configs share nothing of the host (no virtiofs share, no
    # raw QEMU args that could add a -virtfs), and the bundle reached each guest over SSH.
    for vm in rig.vms():
        shares = [k for k in vm.config if k.startswith(("virtiofs", "args", "mp"))]
        assert shares == [], (vm.name, shares)
    for guest in guests.values():
        bundle = root(guest, "find", "/usr/local/lib/sand/bundle", "-name", "secrets.sh")
        assert bundle.strip() == "/usr/local/lib/sand/bundle/secrets.sh"
        mounts = root(guest, "cat", "/proc/mounts").splitlines()
        assert not [m for m in mounts if m.split()[2] in NETWORK_FS], mounts

    # The canary is nowhere it must not be.
    assert watch.containing(CANARY) == []
    assert watch.containing(git_server.token) == []
    for text in (plan.stdout, plan.stderr, proc.stdout, proc.stderr):
        assert CANARY not in text and git_server.token not in text
    assert CANARY not in everything_under(sand.state_dir)
    for vm in rig.vms():
        marker_text = str(vm.config.get("description", "")) + str(vm.config.get("tags", ""))
        assert CANARY not in marker_text
    assert sand.run("plan", "--json", env=env).stdout.count(CANARY) == 0
    first_digest = audit_names_the_secrets_and_hides_them(sand, git_server.token)

    # Converged: a second plan is a no-op.
    again = sand.run("plan", "--detailed-exitcode", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "No changes." in again.stdout

    # Rotation reaches the running guest without recreating it.
    vmids = {vm.name: vm.vmid for vm in rig.vms()}
    env["SAND_TEST_API_TOKEN"] = ROTATED
    plan = sand.run("plan", env=env)
    assert "secret values changed" in plan.stdout
    with AgentAnswers(rig, guests):
        proc = sand.run("apply", "--auto-approve", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scoped_env(g1, "~/work", "API_TOKEN") == ROTATED
    assert {vm.name: vm.vmid for vm in rig.vms()} == vmids
    assert ROTATED not in proc.stdout + proc.stderr
    assert sand.run("plan", "--detailed-exitcode", env=env).returncode == 0
    # the rotation is in the audit trail as another digest of the same name
    rotated = [r for r in audit_records(sand.state_dir) if r.get("name") == "API_TOKEN"]
    assert rotated[-1]["digest"] != first_digest
    assert ROTATED.encode() not in (sand.state_dir / "audit" / "log.jsonl").read_bytes()


def audit_names_the_secrets_and_hides_them(sand: Sand, git_token: str) -> str:
    """The audit trail of the first apply: each VM's change with the manifest's digest,
    each secret delivered by name and keyed digest, not one byte of a value; the chain
    verifies. The digest of API_TOKEN."""
    records = audit_records(sand.state_dir)
    changes = {r["vm"]: r for r in records if r["kind"] == "apply.change"}
    assert {vm: r["change"] for vm, r in changes.items()} == {
        "agent-1": "create",
        "agent-2": "create",
    }
    manifest_sha = hashlib.sha256(sand.manifest.read_bytes()).hexdigest()
    assert {r["manifest_sha256"] for r in changes.values()} == {manifest_sha}
    delivered = {r["name"]: r for r in records if r["kind"] == "secret.delivered"}
    assert set(delivered) == {"API_TOKEN", "GIT_TOKEN"}
    assert all(
        r["vm"] == "agent-1" and r["digest"].startswith("hmac-sha256:") for r in delivered.values()
    )
    raw = (sand.state_dir / "audit" / "log.jsonl").read_bytes()
    for value in (CANARY, git_token):
        for needle in (value, hashlib.sha256(value.encode()).hexdigest()):
            assert needle.encode() not in raw
    assert verify_host(sand.state_dir / "audit").ok
    return str(delivered["API_TOKEN"]["digest"])


def age_delivery(rig, vmid: int, seconds: int) -> None:
    """Move the delivery time recorded in a VM's secrets tag ``seconds`` into the past."""

    def age() -> None:
        vm = rig.pve.vm(vmid)
        tags = []
        for tag in str(vm.config["tags"]).split(";"):
            if tag.startswith("sand-secrets-"):
                head, _, at = tag.rpartition("-")
                tag = f"{head}-{int(at) - seconds}"
            tags.append(tag)
        vm.config["tags"] = ";".join(tags)

    rig.run(age)


def empty_tmpfs_secrets(guest) -> None:
    """What a reboot does to the guest's secrets: sand's tmpfs directories are gone."""
    proc = guest.run_root(["sh", "-c", "rm -rf /run/user/*/sand /dev/shm/sand-*"])
    assert proc.returncode == 0, proc.stderr


def test_secrets_are_seen_from_a_fresh_host_and_return_after_a_reboot(
    tmp_path, fakepve_server, netns_guest
):
    rig = fakepve_server
    guests = {"agent-1": netns_guest(), "agent-2": netns_guest()}
    identity = guests["agent-1"].client_key_path
    key = guests["agent-1"].client_public_key
    for guest in guests.values():
        home = f"/home/{guest.user}"
        guest.run_root(
            ["sh", "-c", f"cat >> {home}/.ssh/authorized_keys"], input=(key + "\n").encode()
        )
    scoped = [{"name": "API_TOKEN", "scope": "~/work"}]
    manifest = rig.manifest(
        [{"name": "agent-1", "secrets": scoped}, {"name": "agent-2", "secrets": scoped}],
        defaults={"provision": True},
        identity=str(identity),
        derive_bases=False,  # each VM's own guest, made beforehand
    )
    manifest["secrets"] = {"API_TOKEN": {"from": {"env": "SAND_TEST_API_TOKEN"}}}
    host_a, host_b = Sand(tmp_path / "host-a"), Sand(tmp_path / "host-b")
    for host in (host_a, host_b):
        host.workdir.mkdir()
        host.write(manifest)
    env = {
        "SAND_TEST_API_TOKEN": CANARY,
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
    }

    with AgentAnswers(rig, guests):
        proc = host_a.run("apply", "--auto-approve", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for guest in guests.values():
        assert scoped_env(guest, "~/work", "API_TOKEN") == CANARY

    # Host B (a CI runner: a state dir that never delivered anything) sees no change,
    # with the one listing request.
    rig.clear_log()
    proc = host_b.run("plan", "--detailed-exitcode", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No changes." in proc.stdout
    assert [str(r) for r in rig.log] == ["GET /cluster/resources?type=vm -> 200"]

    # Rotation shows from both hosts.
    for host in (host_a, host_b):
        proc = host.run("plan", "--detailed-exitcode", env={**env, "SAND_TEST_API_TOKEN": ROTATED})
        assert proc.returncode == 2 and proc.stdout.count("secret values changed") == 2

    # What sand recorded is neither the value nor a plain hash of it.
    needles = [CANARY, hashlib.sha256(CANARY.encode()).hexdigest()[:16]]
    recorded = [
        str(vm.config.get("tags", "")) + str(vm.config.get("description", "")) for vm in rig.vms()
    ]
    assert all("sand-secrets-1-" in text for text in recorded)
    for text in [*recorded, everything_under(host_a.state_dir), everything_under(host_b.state_dir)]:
        assert not any(n in text for n in needles)

    # agent-1 reboots behind sand's back (fakepve: its uptime restarts; the guest: its
    # tmpfs is empty). B plans a delivery for it alone, and apply puts the value back.
    # Let an hour pass: both booted two hours ago, secrets delivered an hour ago.
    for vm in rig.vms():
        rig.set_uptime(vm.vmid, 2 * 3600)
        age_delivery(rig, vm.vmid, 3600)
    assert host_b.run("plan", "--detailed-exitcode", env=env).returncode == 0
    vmid = rig.vms_named("agent-1")[0].vmid
    rig.reboot(vmid)
    empty_tmpfs_secrets(guests["agent-1"])
    assert not scoped_env(guests["agent-1"], "~/work", "API_TOKEN")
    proc = host_b.run("plan", "--detailed-exitcode", env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "# agent-1 (pve" in proc.stdout
        and "secrets lost (guest rebooted after their delivery at " in proc.stdout
    )
    assert "# agent-2" not in proc.stdout
    with AgentAnswers(rig, guests):
        proc = host_b.run("apply", "--auto-approve", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert scoped_env(guests["agent-1"], "~/work", "API_TOKEN") == CANARY
    assert {vm.vmid for vm in rig.vms_named("agent-1")} == {vmid}  # delivered, not recreated
    for host in (host_a, host_b):
        proc = host.run("plan", "--detailed-exitcode", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
