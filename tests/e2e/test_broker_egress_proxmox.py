"""A Proxmox VM with a deny `egress:` policy clones through the broker (issues 38/39): a
real `sand apply` on fakepve with a netns guest behind the rig's PVE firewall
(``tests/rig/pvefirewall.py``), compiled at the guest's tap from what sand wrote to
fakepve each time it changes, as pve-firewall's update loop does (at a faster cycle).

The policy allows one address that is not the git server; the repository is cloned
through the broker during the apply (the rule to the broker written before the delivery
that uses it), a push to an allowed branch lands, and the git server reached directly
from the guest, as root, is still dropped by the firewall."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sand.broker.store import read_running
from tests.backends.proxmox.test_egress_proxmox import audit_and_switch_on
from tests.cli.helpers import Sand
from tests.e2e.test_broker_sleep import brokered_app, brokered_env
from tests.e2e.test_rig_pvefirewall import CONNECT
from tests.provision.e2e_helpers import as_user
from tests.required import missing
from tests.rig._util import missing_tools, run
from tests.rig.gitserver import GitServer
from tests.rig.guest import BRIDGE, ensure_bridge
from tests.rig.pvefirewall import HostFirewall, Nic
from tests.rig.tlscert import self_signed

pytestmark = pytest.mark.e2e


class FirewallFollower:
    """The VM's firewall config in fakepve compiled at the netns guest's tap whenever it
    changes: what pve-firewall's update loop does on a node. It also plays the guest
    agent, reporting the netns guest's address on net0's MAC as it is now (the create
    rewrites net0 with ``firewall=1``)."""

    def __init__(
        self,
        rig: Any,
        firewall: HostFirewall,
        name: str,
        nic_of: Any,
        address: str,
        lag: float = 0.0,
    ) -> None:
        self.rig, self.firewall, self.name, self.nic_of = rig, firewall, name, nic_of
        self.address = address
        # How long after a change is written it reaches the tap: pve-firewall reads the
        # config every $updatetime (10 s), so a change waits up to that on a node.
        self.lag = lag
        self.net0 = ""
        self.applied: dict[str, Any] | None = None
        self.applied_at = 0.0
        self.seen: tuple[dict[str, Any], float] | None = None
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop.wait(0.05):  # the loop's cycle, as pve-firewall's 10 s
            try:
                vms = self.rig.vms_named(self.name)
                if not vms:
                    continue
                vmid = vms[0].vmid
                net0 = str(vms[0].config.get("net0", ""))
                if net0 and net0 != self.net0:
                    self.rig.set_agent_ip(vmid, self.address)
                    self.net0 = net0
                state = self.rig.run(self.rig.pve.guest_firewall, vmid)
                if state == self.applied:
                    continue
                if self.seen is None or self.seen[0] != state:
                    self.seen = (state, time.monotonic())
                if time.monotonic() - self.seen[1] >= self.lag:
                    self.firewall.apply(vmid, [self.nic_of(vmid)], state)
                    self.applied, self.applied_at = state, time.monotonic()
            except BaseException as e:  # shown by the test
                self.error = e
                return

    def settled(self, timeout: float) -> bool:
        """Whether what fakepve holds reached the tap within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.error is None:
            vms = self.rig.vms_named(self.name)
            if vms and self.applied == self.rig.run(self.rig.pve.guest_firewall, vms[0].vmid):
                return True
            self.stop.wait(0.1)
        return False

    def __enter__(self) -> FirewallFollower:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def _behind_firewall(
    tmp_path: Path, rig: Any, guest: Any, name: str
) -> tuple[str, Callable[[int], Nic], GitServer, Sand, dict[str, str]]:
    """The rig for a deny VM on the netns ``guest``: (the bridge's address, the guest's
    NIC as the VM's net0, a git server over TLS named ``name``, sand, its environment);
    the datacenter's firewall on and read-only granted."""
    absent = missing_tools(("nft", "ip"))
    if absent:
        missing(f"the rig's PVE firewall needs {', '.join(absent)} (run .ci/rig-setup.sh)")
    host = ensure_bridge()
    mac = run(["ip", "netns", "exec", guest.netns, "cat", "/sys/class/net/eth0/address"])
    cert, key = self_signed(tmp_path, host)
    server = GitServer(name, tls=(cert, key)).start()
    audit_and_switch_on(rig)

    def nic_of(vmid: int) -> Nic:
        return Nic(vmid, 0, guest.veth, mac.stdout.decode().strip())

    return host, nic_of, server, Sand(tmp_path), brokered_env(tmp_path, server.token, cert)


def test_a_deny_vm_clones_through_the_broker_and_reaches_nothing_else(
    tmp_path, fakepve_server, netns_guest
) -> None:
    rig = fakepve_server
    guest = netns_guest()
    host, nic_of, server, sand, env = _behind_firewall(
        tmp_path, rig, guest, "rig-broker-egress-5c1e9a7d20"
    )
    try:
        url = server.create_repo("app", {"README.md": "through a deny policy\n"})
        policy = {"cidrs": ["192.0.2.7"], "ports": [443]}  # not the git server
        sand.write(brokered_app(rig, guest, url, {"name": "agent-1", "egress": policy}))

        ident = secrets.token_hex(2)
        with (
            HostFirewall(ident, BRIDGE, tmp_path) as firewall,
            FirewallFollower(rig, firewall, "agent-1", nic_of, guest.address) as follower,
        ):
            proc = sand.run("apply", "--auto-approve", env=env)
            assert follower.error is None, follower.error
            assert proc.returncode == 0, proc.stdout + proc.stderr
            # The clone ran behind the policy, the broker's rule in it.
            assert follower.applied is not None
            assert follower.applied["vm"]["options"]["policy_out"] == "DROP"
            assert any(r["dest"] == host for r in follower.applied["vm"]["rules"])
            assert as_user(guest, "cat ~/src/app/README.md").stdout == b"through a deny policy\n"

            script = (
                "cd ~/src/app && git checkout -qB agent/deny && date > w.txt && git add w.txt "
                "&& git -c user.name=a -c user.email=a@b commit -qm w && "
                "GIT_TERMINAL_PROMPT=0 git push -q origin agent/deny"
            )
            pushed = as_user(guest, script)
            assert pushed.returncode == 0, pushed.stderr
            assert "agent/deny" in server.branches("app")

            # The git server itself, past the broker: dropped, as root.
            port = url.split("://", 1)[1].split("/", 1)[0].rpartition(":")[2] or "443"
            argv = ["ip", "netns", "exec", guest.netns, "python3", "-c", CONNECT, host, port]
            direct = subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout
            assert "BLOCKED TimeoutError" in direct, direct
            fetched = as_user(guest, "cd ~/src/app && GIT_TERMINAL_PROMPT=0 git fetch -q origin")
            assert fetched.returncode == 0, fetched.stderr  # the broker still answers
            assert server.token not in proc.stdout + proc.stderr

            # A restart of this host (here a kill) takes the broker and the token it held,
            # while the VM runs on. The next plan delivers to the VM again, which starts
            # the broker (the VM's firewall rule follows its new port) with the token.
            running = read_running(sand.state_dir / "projects" / "demo" / "broker")
            assert running is not None
            os.kill(running.pid, signal.SIGKILL)
            fetch = "cd ~/src/app && GIT_TERMINAL_PROMPT=0 timeout 20 git fetch -q origin"
            assert as_user(guest, fetch).returncode != 0
            plan = sand.run("plan", "--detailed-exitcode", env=env)
            assert plan.returncode == 2, plan.stdout + plan.stderr
            assert "the broker on this host is not running" in " ".join(plan.stdout.split())
            again = sand.run("apply", "--auto-approve", env=env)
            assert again.returncode == 0, again.stdout + again.stderr
            fetched = as_user(guest, fetch)
            assert fetched.returncode == 0, fetched.stderr
            settled = sand.run("plan", "--detailed-exitcode", env=env)
            assert settled.returncode == 0, settled.stdout + settled.stderr
    finally:
        server.stop()
        sand.run("destroy", "--auto-approve", "--allow-data-loss", env=env)


def test_a_brokered_clone_right_after_its_rule_waits_for_pve_firewalls_update(
    tmp_path, fakepve_server, netns_guest
) -> None:
    """pve-firewall applies what the API wrote at its next update, up to 10 s later
    (``$updatetime``). A reprovision whose only change is a repository writes the broker's
    rule and clones at once: under ``policy_out=DROP`` the clone's first SYNs are dropped,
    not refused, and the kernel sends them again (1, 3, 7, 15 s), so the clone waits for
    the rule instead of failing. Here each change reaches the tap 10 s after it is
    written, and the apply succeeds at its first try."""
    rig = fakepve_server
    guest = netns_guest()
    host, nic_of, server, sand, env = _behind_firewall(
        tmp_path, rig, guest, "rig-broker-lag-3b7e0c5a19"
    )
    try:
        url = server.create_repo("app", {"README.md": "after the update\n"})
        policy = {"cidrs": ["192.0.2.7"], "ports": [443]}
        data = brokered_app(rig, guest, url, {"name": "agent-1", "egress": policy})
        data["vms"][0]["repos"] = []  # first without the repository: no broker, no rule
        sand.write(data)

        with (
            HostFirewall(secrets.token_hex(2), BRIDGE, tmp_path) as firewall,
            FirewallFollower(rig, firewall, "agent-1", nic_of, guest.address, 10.0) as slow,
        ):
            first = sand.run("apply", "--auto-approve", env=env)
            assert first.returncode == 0, first.stdout + first.stderr
            assert slow.settled(30), slow.error
            assert not any(r["dest"] == host for r in slow.applied["vm"].get("rules", []))

            data["vms"][0]["repos"] = ["app"]
            sand.write(data)
            started = time.monotonic()
            second = sand.run("apply", "--auto-approve", env=env)
            ended = time.monotonic()
            assert slow.error is None, slow.error
            assert second.returncode == 0, second.stdout + second.stderr
            assert as_user(guest, "cat ~/src/app/README.md").stdout == b"after the update\n"
            # The rule sand wrote in this apply reached the tap only 10 s later, while the
            # apply, whose clone needed it, was still running: the clone waited for it.
            assert slow.applied is not None
            assert any(r["dest"] == host for r in slow.applied["vm"]["rules"])
            assert started + 10 <= slow.applied_at <= ended
    finally:
        server.stop()
        sand.run("destroy", "--auto-approve", "--allow-data-loss", env=env)
