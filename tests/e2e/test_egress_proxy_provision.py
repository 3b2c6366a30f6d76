"""``sand apply`` on fakepve with a real guest behind the VM (a netns sshd guest, as in
``test_apply_proxmox_guests.py``), for a VM whose deny policy lists domains on a
backend that declares ``egress_proxy``: apply starts the proxy for Proxmox guests on
this host, registers the VM from the address it reaches it at, and tells the guest
its proxy with the VM's credential, which never appears in an argv on either side.
From inside the guest, as root, with what provisioning wrote: a name not listed is
refused by the proxy and logged on the host; ``sand destroy`` stops the proxy."""

from __future__ import annotations

import json
import os
import signal
import socket

import pytest

from sand.egress import registry
from tests.backends.proxmox.test_egress_proxmox import audit_and_switch_on
from tests.cli.helpers import Sand
from tests.e2e.test_apply_proxmox_guests import AgentAnswers
from tests.egress.test_checkup import port_closes
from tests.provision.e2e_helpers import root, stand_in_agents
from tests.rig.argv import ArgvWatch
from tests.rig.guest import BRIDGE_ADDRESS

pytestmark = pytest.mark.e2e


class AnswersOnceRunning(AgentAnswers):
    """The guest agent answers once the VM runs: the config write that puts
    ``firewall=1`` on net0 comes after the clone, so the NIC is read as it boots."""

    def _loop(self) -> None:
        while not self.stop.is_set():
            for vm in self.rig.vms():
                guest = self.guests.get(vm.name)
                if guest is not None and vm.vmid not in self.answered and vm.status == "running":
                    self.rig.set_agent_ip(vm.vmid, guest.address)
                    self.answered.add(vm.vmid)
            self.stop.wait(0.05)  # polling fakepve's state, as the agent thread it stands for


def free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def test_apply_points_the_guest_at_its_proxy_which_vouches_for_it_alone(
    tmp_path, fakepve_server, netns_guest, monkeypatch
):
    rig = fakepve_server
    audit_and_switch_on(rig)
    guest = netns_guest()
    listen = f"{BRIDGE_ADDRESS}:{free_port(BRIDGE_ADDRESS)}"
    sand = Sand(tmp_path)
    egress = {"domains": ["allowed.test"], "ports": [443]}
    manifest = rig.manifest(
        [{"name": "agent-1", "egress": egress}],
        defaults={"provision": True},
        identity=str(guest.client_key_path),
        derive_bases=False,
        egress_proxy=listen,
    )
    sand.write(manifest)
    env = {"SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents"))}
    monkeypatch.setenv("SAND_STATE_DIR", str(sand.state_dir))
    directory = registry.proxy_dir("demo", "pve")
    try:
        with AnswersOnceRunning(rig, {"agent-1": guest}), ArgvWatch(guest, host=True) as watch:
            done = sand.run("apply", "--auto-approve", env=env)
        assert done.returncode == 0, done.stdout + done.stderr

        credential = registry.credential("demo", "pve", "agent-1")
        told = root(guest, "cat", "/etc/environment").splitlines()
        url = f"http://agent-1:{credential}@{listen}"
        assert f"https_proxy={url}" in told and f"http_proxy={url}" in told
        assert url in root(guest, "cat", "/etc/apt/apt.conf.d/80sand-egress-proxy")
        assert watch.containing(credential) == []  # in no argv, host's or guest's
        assert credential not in done.stdout + done.stderr
        vms = json.loads((directory / "vms.json").read_text())
        assert vms == {"agent-1": {"source": guest.address}}

        # As root in the guest, with the settings provisioning wrote.
        script = "set -a; . /etc/environment; curl -sS --max-time 20 https://exfil.test/"
        refused = guest.run_root(["bash", "-c", script])
        assert refused.returncode != 0 and b"403" in refused.stderr, refused.stderr
        log = registry.denial_log("demo", "pve", "agent-1").read_text().splitlines()
        (entry,) = [json.loads(line) for line in log]
        assert (entry["vm"], entry["destination"]) == ("agent-1", "exfil.test:443")

        # A restart of this host (here a kill) takes the proxy while the VM runs on: it
        # fails closed. The next plan delivers to the VM again, which starts the proxy.
        running = registry.listener_of("demo", "pve")
        assert running is not None
        os.kill(running[0], signal.SIGKILL)
        assert port_closes(int(listen.rpartition(":")[2]))
        plan = sand.run("plan", "--detailed-exitcode", env=env)
        assert plan.returncode == 2, plan.stdout + plan.stderr
        assert "the egress proxy on this host is not running" in " ".join(plan.stdout.split())
        with AnswersOnceRunning(rig, {"agent-1": guest}):
            again = sand.run("apply", "--auto-approve", env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        assert (registry.listener_of("demo", "pve") or (0, ""))[1] == listen
        refused = guest.run_root(["bash", "-c", script])
        assert refused.returncode != 0 and b"403" in refused.stderr, refused.stderr
        assert len(registry.denial_log("demo", "pve", "agent-1").read_text().splitlines()) == 2
        settled = sand.run("plan", "--detailed-exitcode", env=env)
        assert settled.returncode == 0, settled.stdout + settled.stderr

        # The host's owner moves the proxy: the guest is provisioned again and told the
        # new address; the proxy listens there and no longer at the old one.
        moved = f"{BRIDGE_ADDRESS}:{free_port(BRIDGE_ADDRESS)}"
        manifest["backends"]["pve"]["egress_proxy"] = moved
        sand.write(manifest)
        with AnswersOnceRunning(rig, {"agent-1": guest}):
            again = sand.run("apply", "--auto-approve", env=env)
        assert again.returncode == 0, again.stdout + again.stderr
        told = root(guest, "cat", "/etc/environment").splitlines()
        assert f"https_proxy=http://agent-1:{credential}@{moved}" in told
        refused = guest.run_root(["bash", "-c", script])
        assert refused.returncode != 0 and b"403" in refused.stderr, refused.stderr
        assert len(registry.denial_log("demo", "pve", "agent-1").read_text().splitlines()) == 3
        address, _, port = listen.rpartition(":")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, int(port)), timeout=5).close()
        listen = moved

        gone = sand.run("destroy", "--auto-approve", env=env)
        assert gone.returncode == 0, gone.stdout + gone.stderr
        assert not (directory / "run.json").exists()  # the last VM took the proxy with it
        address, _, port = listen.rpartition(":")
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((address, int(port)), timeout=5).close()
    finally:
        registry.stop(directory)
