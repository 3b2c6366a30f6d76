"""Cloud-init for real behind fakepve: every VM that starts boots a real Debian guest
(QEMU, TCG) from the NoCloud drive PVE would generate from the VM's stored ``ciuser``,
``sshkeys`` and ``ipconfig0`` (``tests/rig/pveguests.py``), takes its address from DHCP,
and reports it through its qemu-guest-agent, which is what sand asks.

One golden base and two VMs cloned from it: the base's build machine is a VM cloned from
the plain template (sand reaches it with the key it sent and the address the agent
reported, provisions and generalises it); the two clones boot from its frozen disk, one
per apply: sand waits 5 min for a guest's agent, and two TCG guests booting side by side on
a loaded 2-core host took longer than that. Three boots in all (70-150 s each, by load;
over 300 s at load 20-39, where an apply whose agent wait ran out is run again, as a person
would, while the guest still boots; the rig's own waits on the agent grow with the boots
it measured, tests/rig/pveguests.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import Sand
from tests.fakepve_rig import cloudinit
from tests.provision.e2e_helpers import stand_in_agents
from tests.required import missing
from tests.rig._util import missing_tools
from tests.rig.clones import sand_block

# One apply: a base build (boot, provision, generalise, shut down) and a clone, or a clone.
# Generous: TCG on a shared 2-core machine.
APPLY_DEADLINE = 1200
pytestmark = [pytest.mark.e2e, pytest.mark.tcg, pytest.mark.timeout(4 * APPLY_DEADLINE + 300)]


@pytest.fixture
def hypervisor(fakepve_server: Any) -> Iterator[Any]:
    from tests.rig import pveimage
    from tests.rig.pveguests import REQUIRED_TOOLS, QemuHypervisor, cleanup_stale

    absent = missing_tools(REQUIRED_TOOLS)
    if absent:
        missing(f"the Proxmox cloud-init rig needs {', '.join(absent)} (run .ci/rig-setup.sh)")
    cleanup_stale()  # what a crashed earlier run left
    image = pveimage.build()  # scripts/bootstrap builds it; a cold cache builds it here
    rig = fakepve_server
    # Timed tasks run apart from their request: a shutdown waits for the real guest.
    rig.set_time_scale(0.01)
    with QemuHypervisor(image) as hv:
        rig.run(setattr, rig.pve, "hypervisor", hv)
        try:
            yield hv
        finally:
            rig.run(setattr, rig.pve, "hypervisor", None)


def _apply(sand: Sand, env: dict[str, str], log: Path) -> tuple[int | None, str]:
    """``sand apply`` within the deadline (its output in ``log`` as it goes): exit status
    (None: killed at the deadline) and output."""
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sand", "apply", "--auto-approve"],
            cwd=sand.workdir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "SAND_STATE_DIR": str(sand.state_dir), "NO_COLOR": "1", **env},
        )  # fmt: skip
        try:
            returncode: int | None = proc.wait(APPLY_DEADLINE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            returncode = None
    return returncode, log.read_text(errors="replace")


AGENT_WAIT_CUT = "no address from the guest agent after"


def _apply_until_booted(
    sand: Sand, env: dict[str, str], log: Path, hv: Any
) -> tuple[int | None, str, int]:
    """``sand apply``, again as a person would while sand's own 5-minute wait for a guest's
    agent is what ran out (a transient error: the next apply goes on with that VM) and a
    guest is still booting, for as long as the boots measured so far say a boot may take
    on this host now (4 of the slowest, 10 min at least). Exit status, output, applies."""
    started, applies = time.monotonic(), 0
    while True:
        applies += 1
        returncode, output = _apply(sand, env, log.with_suffix(f".{applies}.log"))
        booting = [m for m in hv.machines.values() if m.addressed is None]
        patience = max(600.0, 4 * max(hv.boots(), default=0.0))
        if returncode != 1 or AGENT_WAIT_CUT not in output or not booting:
            return returncode, output, applies
        if time.monotonic() - started > patience:
            return returncode, output, applies


def _ssh(key: Path, user: str, ip: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ssh", "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
         "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
         "-o", "ConnectTimeout=20", f"{user}@{ip}", "--", *argv],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_clones_of_a_golden_base_boot_with_cloud_init_as_machines_of_their_own(
    tmp_path: Path, fakepve_server: Any, hypervisor: Any
) -> None:
    rig, hv = fakepve_server, hypervisor
    sand = Sand(tmp_path)
    env = {"SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents"))}
    walls = []
    for names in (["ci-1"], ["ci-1", "ci-2"]):
        data = rig.manifest(
            [{"name": name, "memory": "1GiB"} for name in names],
            defaults={"provision": True, "timezone": "Etc/UTC", "image": "wb"},
        )
        data["images"] = {"wb": {"agents": ["claude"]}}
        sand.write(data)
        started = time.monotonic()
        returncode, output, applies = _apply_until_booted(
            sand, env, tmp_path / f"apply-{len(names)}.log", hv
        )
        walls.append((round(time.monotonic() - started), applies))
        assert returncode == 0, output + hv.consoles()

    (base,) = [t for t in rig.templates() if sand_block(t.config.get("description")).get("kind")]
    vms = {name: rig.vms_named(name)[0] for name in ("ci-1", "ci-2")}
    user = str(vms["ci-1"].config["ciuser"])
    public = rig.identity.with_name(rig.identity.name + ".pub").read_text().split()[:2]
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)

    # The base's build machine: cloned from the plain template, booted with its own seed,
    # reached at the address DHCP gave it, then shut down through its agent.
    build = hv.machine(base.vmid)
    assert hv.sources[base.vmid] == rig.template_vmid
    assert build.proc.poll() is not None
    assert build.address is not None and (build.mac, build.address) in hv.acks()

    seen: dict[str, dict[str, str]] = {}
    for name, vm in vms.items():
        m = hv.machine(vm.vmid)
        assert hv.sources[vm.vmid] == base.vmid  # cloned from the golden base
        assert m.proc.poll() is None
        # The drive the guest booted holds what PVE generates from the VM's config now.
        assert m.seed == cloudinit.seed_files(dict(vm.config), vm.vmid)
        # DHCP gave the address, the guest agent reported it, sand used it.
        ip = hv.leases()[m.mac]
        assert m.address == ip
        assert rig.count("GET", contains=f"/qemu/{vm.vmid}/agent/network-get-interfaces") >= 1
        shell = sand.run("shell", name, "--", "sh", "-c", "hostname -I; id -un", env=env)
        assert shell.returncode == 0, shell.stdout + shell.stderr
        assert ip in shell.stdout.split() and shell.stdout.split()[-1] == user
        # The key sand sent in sshkeys lets in; another key is refused.
        assert _ssh(rig.identity, user, ip, "true").returncode == 0
        refused = _ssh(stranger, user, ip, "true")
        assert refused.returncode == 255 and "Permission denied" in refused.stderr
        keys = _ssh(rig.identity, user, ip, "cat", ".ssh/authorized_keys").stdout.splitlines()
        assert [k.split()[:2] for k in keys if k.strip()] == [public]
        # A new cloud-init instance on the clone's first boot: its own seed's instance-id.
        facts = {}
        for fact, path in (
            ("instance", "/var/lib/cloud/data/instance-id"),
            ("machine", "/etc/machine-id"),
            ("hostkey", "/etc/ssh/ssh_host_ed25519_key.pub"),
        ):
            read = _ssh(rig.identity, user, ip, "cat", path)
            assert read.returncode == 0, read.stderr
            facts[fact] = read.stdout.split()[1] if fact == "hostkey" else read.stdout.strip()
        assert m.seed["meta-data"] == f"instance-id: {facts['instance']}\n"
        # The user-data's package_upgrade ran on this instance (cloud-init's package module).
        ran = _ssh(rig.identity, user, ip, "sudo", "-n", "cat", "/var/log/cloud-init.log")
        module = re.search(r"Running module package[-_]update[-_]upgrade[-_]install", ran.stdout)
        assert module, ran.stdout[-3000:] + ran.stderr
        assert len(facts["machine"]) == 32
        seen[name] = facts
    # Machines of their own: host keys, machine-ids and instances all differ.
    for fact in ("instance", "machine", "hostkey"):
        assert seen["ci-1"][fact] != seen["ci-2"][fact], fact
    clones_meta = {hv.machine(vm.vmid).seed["meta-data"] for vm in vms.values()}
    assert build.seed["meta-data"] not in clones_meta

    status = sand.run("status", "--deep", env=env)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "ci-1" in status.stdout and "ci-2" in status.stdout

    boots = {
        m.vmid: round((m.addressed or 0) - m.launched)
        for m in [build, *(hv.machine(vm.vmid) for vm in vms.values())]
    }
    print(
        f"boot to a DHCP address via the agent (s) by vmid: {boots}; applies "
        f"(seconds, runs) {walls}; agent waits x{hv.slowness():.1f}; load {os.getloadavg()}"
    )
