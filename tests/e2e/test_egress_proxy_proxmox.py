"""Domains on Proxmox, with real packets: a netns guest behind the rig's PVE firewall
(``tests/rig/pvefirewall.py``) compiled from what ``sand apply`` wrote to fakepve for
``egress: {domains: [allowed.test]}`` with the backend's ``egress_proxy`` declared, and
sand's egress proxy for Proxmox guests listening on the bridge. From inside the guest,
as root: ``curl`` through the proxy to the allowed name's HTTPS host works, a name not
listed is refused by the proxy (and logged on the host with VM, destination and time),
and the allowed host's address reached directly, past the proxy, is dropped by the
firewall (and logged by it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.egress import registry
from tests.backends.proxmox.test_cli import Sand
from tests.backends.proxmox.test_egress_proxmox import audit_and_switch_on
from tests.e2e.test_rig_pvefirewall import ALLOWED, GUEST, HOST, Plugged, plugged
from tests.fakepve_rig.rig import FakePveRig
from tests.rig.httpsupstream import HttpsUpstream
from tests.rig.tlscert import self_signed

# The bridge and its addresses are test_rig_pvefirewall's: one worker for both modules.
pytestmark = [pytest.mark.e2e, pytest.mark.xdist_group("pvefirewall")]
__all__ = ["plugged"]  # the guest on the rig's bridge, behind its PVE firewall

NAME, OTHER = "allowed.test", "exfil.test"
PROXY_PORT = 3128


@pytest.fixture
def rig(fakepve_server: FakePveRig) -> FakePveRig:
    return fakepve_server


@pytest.fixture
def upstream(tmp_path: Path) -> Iterator[tuple[HttpsUpstream, str]]:
    """The allowed name's HTTPS host, on an address of the bridge: (it, its CA file)."""
    cert, key = self_signed(tmp_path, ALLOWED, (NAME, OTHER))
    server = HttpsUpstream(ALLOWED, cert, key)
    yield server, cert
    server.stop()


def start_listener(env: dict[str, str], hosts: Path) -> subprocess.Popen[bytes]:
    """The proxy for Proxmox guests as apply starts it, in a mount namespace whose
    /etc/hosts names the rig's upstream (the host's resolver answers the allowed name;
    this machine's own /etc/hosts is never touched)."""
    script = (
        f"mount --bind {hosts} /etc/hosts && exec {sys.executable} -m sand.egress.listener "
        f"demo pve {HOST} {PROXY_PORT}"
    )
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", script]
    return subprocess.Popen(argv, env=env, start_new_session=True)


def curl(plugged: Plugged, cafile: str, url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["curl", "-sS", "--connect-timeout", "3", "--max-time", "20", "--cacert", cafile]
    return subprocess.run(
        ["ip", "netns", "exec", plugged.ns, *argv, *extra, url],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_curl_reaches_the_allowed_name_only_through_the_proxy(
    plugged: Plugged,
    rig: FakePveRig,
    upstream: tuple[HttpsUpstream, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, cafile = upstream
    port = int(server.host.rpartition(":")[2])
    audit_and_switch_on(rig)
    run = Sand(rig, tmp_path)
    egress = {"domains": [NAME], "ports": [port]}
    run.write([{"name": "a", "egress": egress}], egress_proxy=f"{HOST}:{PROXY_PORT}")
    done = run("apply", "--auto-approve")
    assert done.returncode == 0, done.stdout + done.stderr
    (vm,) = rig.vms()
    # The guest's packets meet what pve-firewall compiles from what sand wrote (at the
    # rig's tap, which is numbered as VM 100's).
    written = rig.run(rig.pve.guest_firewall, vm.vmid)
    assert any(r["dest"] == HOST for r in written["vm"]["rules"])
    plugged.firewall.apply(plugged.nic.vmid, [plugged.nic], written)

    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{ALLOWED} {NAME} {OTHER}\n")
    monkeypatch.setenv("SAND_STATE_DIR", run.env["SAND_STATE_DIR"])
    listener = start_listener(run.env, hosts)
    try:
        directory = registry.proxy_dir("demo", "pve")
        deadline = time.monotonic() + 15
        while not (directory / "run.json").exists():  # waiting on the listener's own record
            assert listener.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        # What provisioning does once sand reaches the guest at its address.
        proxy = registry.register("demo", "pve", "a", GUEST, f"{HOST}:{PROXY_PORT}")
        assert json.loads((directory / "run.json").read_text())["pid"] == listener.pid

        allowed = curl(plugged, cafile, f"https://{NAME}:{port}/repos/x", "--proxy", proxy)
        assert allowed.returncode == 0, allowed.stderr
        assert json.loads(allowed.stdout) == {"method": "GET", "path": "/repos/x"}
        assert [r.path for r in server.received] == ["/repos/x"]

        refused = curl(plugged, cafile, f"https://{OTHER}:{port}/", "--proxy", proxy)
        assert refused.returncode != 0 and "403" in refused.stderr
        assert len(server.received) == 1  # nothing of it arrived
        log = registry.denial_log("demo", "pve", "a").read_text().splitlines()
        (entry,) = [json.loads(line) for line in log]
        assert (entry["vm"], entry["destination"]) == ("a", f"{OTHER}:{port}")
        assert time.time() - 120 < entry["time"] <= time.time()

        direct = curl(plugged, cafile, f"https://{ALLOWED}:{port}/", "--noproxy", "*")
        assert direct.returncode == 28, direct.stderr  # timed out: dropped, not refused
        assert len(server.received) == 1
        logged = f"DST={ALLOWED} "
        deadline = time.monotonic() + 10
        while not any(logged in line for line in plugged.firewall.log(plugged.nic.vmid)):
            assert time.monotonic() < deadline, plugged.firewall.log(plugged.nic.vmid)
            time.sleep(0.1)  # waiting on the netlink log's reader
        lines = [x for x in plugged.firewall.log(plugged.nic.vmid) if logged in x]
        assert all(f"DPT={port}" in x.split() and " policy DROP: " in x for x in lines), lines
    finally:
        os.killpg(listener.pid, 15)
        listener.wait(timeout=30)
