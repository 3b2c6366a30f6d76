"""Warm pools on fakepve with real guests (issue 29, items 4 and 6): spares are made
from a golden image and provisioned with nothing per VM; a VM naming the pool claims
one and is given its own identity, its own secrets (and no other VM's) and its repo on
that very guest, without a clone or a boot; the pool refills in the same apply.

fakepve holds the API side; each VM's guest is a real netns guest that follows the VM's
vmid and incarnation (``tests/rig/clones.py``): a claimed spare keeps its guest."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from tests.cli.helpers import Sand
from tests.e2e.test_golden_bases_proxmox import guests as guests  # the same real guests
from tests.provision.e2e_helpers import out, root, scoped_env, stand_in_agents

if TYPE_CHECKING:
    from tests.rig.guest import NetnsGuest

pytestmark = pytest.mark.e2e

CANARY_A = "canary-pool-a-7c1e-only-in-agent-a"
CANARY_B = "canary-pool-b-93d2-only-in-agent-b"
SPARES = ("agents-spare-1", "agents-spare-2")
BASE_KEYS = "/var/lib/sand/base-host-keys"  # the golden base's, recorded as it was generalized


def _identity(guest: NetnsGuest) -> tuple[str, str, str]:
    """(hostname, machine-id, the SSH host key) of a guest."""
    return (
        root(guest, "cat", "/etc/hostname").strip(),
        root(guest, "cat", "/etc/machine-id").strip(),
        root(guest, "sh", "-c", "cat /etc/ssh/ssh_host_ed25519_key.pub").split()[1],
    )


def test_a_claimed_spare_is_its_new_vm_with_only_its_own_secrets(
    tmp_path, fakepve_server, guests, git_server
):
    rig = fakepve_server
    sand = Sand(tmp_path)
    repo_url = git_server.create_repo("app", {"README.md": "hello from the forge\n"})
    token_file = tmp_path / "git.token"
    token_file.write_text(git_server.token + "\n")
    token_file.chmod(0o600)
    data = rig.manifest([], defaults={"provision": True, "timezone": "Etc/UTC", "image": "wb"})
    data["images"] = {"wb": {"agents": ["claude"]}}
    data["pools"] = {"agents": {"warm": 2}}
    data["secrets"] = {
        "API_TOKEN": {"from": {"env": "SAND_TEST_A"}},
        "OTHER_TOKEN": {"from": {"env": "SAND_TEST_B"}},
        "GIT_TOKEN": {"from": {"file": str(token_file)}},
    }
    data["repos"] = {"app": {"url": repo_url, "token": "GIT_TOKEN", "path": "~/src/app"}}
    env = {
        "SAND_TEST_A": CANARY_A,
        "SAND_TEST_B": CANARY_B,
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
    }
    sand.write(data)
    with guests:
        proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
        spares = {name: guests.guest_of(name) for name in SPARES}
        before = {name: _identity(g) for name, g in spares.items()}
        vmids = {name: rig.vms_named(name)[0].vmid for name in SPARES}
        for guest in spares.values():
            # Provisioned up to what is per VM: the agent, no repo, no secret.
            assert "stand-in claude" in out(guest, "bash -lc 'claude --version'")
            assert out(guest, "ls ~/src 2>/dev/null || true").strip() == ""

        data["vms"] = [
            {
                "name": "agent-a",
                "pool": "agents",
                "repos": ["app"],
                "secrets": [{"name": "API_TOKEN", "scope": "~/work"}],
            },
            {
                "name": "agent-b",
                "pool": "agents",
                "secrets": [{"name": "OTHER_TOKEN", "scope": "~/work"}],
            },
        ]
        sand.write(data)
        plan = sand.run("plan", env=env)
        assert '+ vm "agent-a" (claims spare agents-spare-1 of pool agents) {' in plan.stdout
        assert '+ vm "agent-b" (claims spare agents-spare-2 of pool agents) {' in plan.stdout
        assert '+ spare "agents-spare-2" of pool agents (refill 2/2) {' in plan.stdout
        rig.clear_log()
        proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)

    a, b = guests.guest_of("agent-a"), guests.guest_of("agent-b")
    # The very guests of the spares: renamed, neither cloned nor started.
    assert a is spares["agents-spare-1"] and b is spares["agents-spare-2"]
    assert rig.vms_named("agent-a")[0].vmid == vmids["agents-spare-1"]
    for vmid in vmids.values():
        assert not rig.requests("POST", contains=f"/qemu/{vmid}/status/")
    # Each has only its own secret.
    assert scoped_env(a, "~/work", "API_TOKEN") == CANARY_A
    assert not scoped_env(a, "~/work", "OTHER_TOKEN")
    assert scoped_env(b, "~/work", "OTHER_TOKEN") == CANARY_B
    assert not scoped_env(b, "~/work", "API_TOKEN")
    for guest, other in ((a, CANARY_B), (b, CANARY_A)):
        found = guest.run_root(["grep", "-rlF", other, "/home", "/run", "/dev/shm", "/etc"])
        assert found.stdout.strip() == b"", found.stdout
    assert "hello from the forge" in out(a, "cat ~/src/app/README.md")
    # Each is a machine of its own: its name, and the machine-id and host keys its spare
    # got at its first boot, kept (a claim makes no key), unlike the other's or the base's.
    after = {"agent-a": _identity(a), "agent-b": _identity(b)}
    assert after["agent-a"][0] == "agent-a" and after["agent-b"][0] == "agent-b"
    for name, spare in (("agent-a", "agents-spare-1"), ("agent-b", "agents-spare-2")):
        assert after[name][1:] == before[spare][1:]
    ids, keys = {i[1] for i in after.values()}, {i[2] for i in after.values()}
    assert len(ids) == 2 and all(len(i) == 32 for i in ids)
    assert len(keys) == 2 and not keys & set(root(a, "cat", BASE_KEYS).split())
    # Refilled: two spares again, each a new VM with a guest of its own.
    for name in SPARES:
        (spare,) = rig.vms_named(name)
        assert spare.vmid not in vmids.values()
        assert guests.guest_of(name) not in (a, b)
    # The canaries are nowhere they must not be.
    for text in (plan.stdout, proc.stdout, proc.stderr):
        assert CANARY_A not in text and CANARY_B not in text
    for vm in rig.vms():
        marker = str(vm.config.get("description", "")) + str(vm.config.get("tags", ""))
        assert CANARY_A not in marker and CANARY_B not in marker
    again = sand.run("plan", "--detailed-exitcode", env=env)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_claimed_spare_pushes_through_the_broker_and_never_holds_the_token(
    tmp_path, fakepve_server, guests
):
    """A warm claim on Proxmox with a brokered repo token (issue 38): the claimed
    guest clones and pushes through the broker, which takes its requests only from that
    guest's address; the token is in none of its files or processes."""
    from tests.e2e.test_broker_guests import _guest_holding
    from tests.rig.gitserver import GitServer
    from tests.rig.guest import ensure_bridge
    from tests.rig.tlscert import self_signed

    rig = fakepve_server
    sand = Sand(tmp_path)
    cert, key = self_signed(tmp_path, ensure_bridge())
    server = GitServer("rig-pool-brokered-5d0c9e1a7b", tls=(cert, key)).start()
    env = {
        "SAND_TEST_GH": server.token,
        "SSL_CERT_FILE": cert,
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
    }
    try:
        repo_url = server.create_repo("app", {"README.md": "brokered claim\n"})
        data = rig.manifest([], defaults={"provision": True, "timezone": "Etc/UTC", "image": "wb"})
        data["images"] = {"wb": {"agents": ["claude"]}}
        data["pools"] = {"agents": {"warm": 1}}
        broker = {"repositories": [repo_url], "push": ["agent/*"]}
        data["secrets"] = {
            "GH": {"from": {"env": "SAND_TEST_GH"}, "deliver": "broker", "broker": broker}
        }
        data["repos"] = {"app": {"url": repo_url, "token": "GH", "path": "~/src/app"}}
        sand.write(data)
        with guests:
            proc = sand.run("apply", "--auto-approve", env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
            spare = guests.guest_of("agents-spare-1")
            data["vms"] = [{"name": "agent-a", "pool": "agents", "repos": ["app"]}]
            sand.write(data)
            proc = sand.run("apply", "--auto-approve", env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
            a = guests.guest_of("agent-a")
            assert a is spare  # claimed: the spare's very guest
            assert "brokered claim" in out(a, "cat ~/src/app/README.md")
            push = (
                "cd ~/src/app && git checkout -qb agent/claimed && date > c.txt && git add c.txt"
                " && git -c user.name=a -c user.email=a@b commit -qm c"
                " && GIT_TERMINAL_PROMPT=0 git push -q origin agent/claimed"
            )
            out(a, push)
            assert "agent/claimed" in server.branches("app")
            assert _guest_holding(a, server.token) == []
            assert server.token not in proc.stdout + proc.stderr
    finally:
        server.stop()
        sand.run("destroy", "--auto-approve", "--allow-data-loss", env=env)


def test_a_claim_takes_the_spares_place_at_the_egress_proxy(
    tmp_path, fakepve_server, guests, monkeypatch
):
    """A spare whose deny policy lists domains was registered at the backend's egress
    proxy under its own name; the claim renames it, and the proxy vouches for the
    claimed VM's credential from that guest, no longer for the spare's (a ``--target``ed
    apply claims without refilling, so nothing else takes the spare's name back)."""
    from sand.egress import registry
    from tests.backends.proxmox.test_egress_proxmox import audit_and_switch_on
    from tests.e2e.test_egress_proxy_provision import free_port
    from tests.rig.guest import BRIDGE_ADDRESS, ensure_bridge

    rig = fakepve_server
    audit_and_switch_on(rig)
    ensure_bridge()
    sand = Sand(tmp_path)
    egress = {"domains": ["allowed.test"], "ports": [443]}
    data = rig.manifest(
        [],
        defaults={"provision": True, "timezone": "Etc/UTC", "image": "wb", "egress": egress},
        egress_proxy=f"{BRIDGE_ADDRESS}:{free_port(BRIDGE_ADDRESS)}",
    )
    data["images"] = {"wb": {"agents": ["claude"]}}
    data["pools"] = {"agents": {"warm": 1}}
    env = {"SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents"))}
    monkeypatch.setenv("SAND_STATE_DIR", str(sand.state_dir))
    directory = registry.proxy_dir("demo", "pve")
    sand.write(data)
    try:
        with guests:
            proc = sand.run("apply", "--auto-approve", env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
            spare = guests.guest_of("agents-spare-1")
            vms = json.loads((directory / "vms.json").read_text())
            assert vms == {"agents-spare-1": {"source": spare.address}}

            data["vms"] = [{"name": "agent-a", "pool": "agents"}]
            sand.write(data)
            proc = sand.run("apply", "--auto-approve", "--target", "agent-a", env=env)
            assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
            assert guests.guest_of("agent-a") is spare
        vms = json.loads((directory / "vms.json").read_text())
        assert vms == {"agent-a": {"source": spare.address}}
        credential = registry.credential("demo", "pve", "agent-a")
        told = root(spare, "cat", "/etc/environment")
        assert f"http://agent-a:{credential}@" in told
        assert "agents-spare-1" not in told
    finally:
        registry.stop(directory)
