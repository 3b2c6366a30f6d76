"""`sand destroy` leaves nothing of a VM on the host: the security model's promise that
deleting a VM removes what it produced, on the host's side (docs/security.md lists
each file sand keeps per VM).

Lima: the limactl stand-in with a real netns guest behind one instance, provisioned
(its host key pinned in sand's known_hosts, its provisioning log kept, its secret's
stamp on the sidecar), and another put to sleep (this host's sleep record); after the
destroy no file under sand's state dir names either VM, its incarnation or the guest's
host key, and no instance is left. Proxmox: fakepve, a VM put to sleep and one
applied, the same search after the destroy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.audit.helpers import audit_records
from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import stand_in_agents

SECRET = "destroy-canary-0d3e-secret-value"
MANIFEST = """\
apiVersion: sand/v1
project: gone
secrets: {NPM_TOKEN: {from: {env: SAND_TEST_NPM}}}
backends: {laptop: {type: lima, lima_home: ./lima, derive_bases: false}}
defaults: {image: debian-12, disk: 20GiB, memory: 2GiB}
vms:
  - {name: dev-1, secrets: [{name: NPM_TOKEN, scope: ~/src}]}
  - {name: idle-2, provision: false}
"""


def traces(state: Path, needles: list[str]) -> dict[str, list[str]]:
    """Each file under sand's state dir that holds one of ``needles``, and which; the
    audit trail left out: it keeps a destroyed VM's history on purpose (docs/audit.md)."""
    found: dict[str, list[str]] = {}
    trail = state / "audit"
    for path in sorted(p for p in state.rglob("*") if p.is_file() and trail not in p.parents):
        text = path.read_bytes().decode(errors="replace")
        hits = [n for n in needles if n in text]
        if hits:
            found[str(path.relative_to(state))] = hits
    return found


def deletes_in_the_trail(state: Path) -> set[str]:
    """The VMs the audit trail records deleted: what the destroy removed stays told."""
    return {r["vm"] for r in audit_records(state) if r.get("change") == "delete" and r["ok"]}


class Cli:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.state = root / "state"
        self.standin = StandIn.create(root, lima_home=root / "lima")
        (root / "sand.yaml").write_text(MANIFEST)
        self.env = {
            **os.environ,
            **self.standin.env(),
            "SAND_STATE_DIR": str(self.state),
            "SAND_TEST_NPM": SECRET,
            "SAND_AGENT_SOURCE": str(stand_in_agents(root / "agents")),
            "NO_COLOR": "1",
        }
        self.env.pop("LIMA_HOME")

    def ok(self, *args: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-m", "sand", *args], env=self.env, capture_output=True,
            text=True, timeout=300, cwd=self.root, check=False, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout


@pytest.mark.e2e
def test_a_destroyed_lima_vm_leaves_nothing_on_the_host(tmp_path: Path, netns_guest) -> None:
    guest = netns_guest()
    cli = Cli(tmp_path)
    cli.standin.back_with_guest("dev-1", guest)
    cli.ok("apply", "--auto-approve")
    assert cli.ok("shell", "dev-1", "--", "hostname")
    cli.ok("sleep", "idle-2")

    uids = [
        json.loads((cli.standin.instance_dir(n) / "sand-marker.json").read_text())["uid"]
        for n in ("dev-1", "idle-2")
    ]
    host_key = guest.host_public_key.split()[1]
    needles = ["dev-1", "idle-2", *uids, host_key]
    before = traces(cli.state, needles)
    # What there was to remove: the pin, the results, the log, the sleep, the inventory.
    for kept in ("known_hosts", "projects/gone/last-apply.json", "projects/gone/asleep.json",
                 "projects/gone/provision-log.json", "projects/gone/inventory.json"):  # fmt: skip
        assert kept in before, before

    # The VM asleep cannot be swept for unpushed work: the flag says it may go anyway.
    out = cli.ok("destroy", "--auto-approve", "--allow-data-loss")
    assert "Destroy complete!" in out or "Apply complete!" in out, out
    assert cli.standin.instances() == []
    assert traces(cli.state, needles) == {}
    assert SECRET not in json.dumps(traces(cli.state, [SECRET]))
    assert deletes_in_the_trail(cli.state) == {"dev-1", "idle-2"}


def test_a_destroyed_proxmox_vm_leaves_nothing_on_the_host(tmp_path: Path, fakepve_server) -> None:
    from tests.cli.helpers import Sand

    rig, sand = fakepve_server, Sand(tmp_path)
    sand.write(rig.manifest([{"name": "pve-1"}, {"name": "pve-2"}]))
    for args in (("apply", "--auto-approve"), ("sleep", "pve-2", "--stop")):
        proc = sand.run(*args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    vmids = [str(vm.vmid) for vm in rig.vms()]
    incarnations = [vm.config["tags"] for vm in rig.vms()]
    assert len(vmids) == 2 and all("sand-" in t for t in incarnations)
    needles = ["pve-1", "pve-2"]
    before = traces(sand.state_dir, needles)
    for kept in ("projects/demo/last-apply.json", "projects/demo/asleep.json",
                 "projects/demo/inventory.json"):  # fmt: skip
        assert kept in before, before

    proc = sand.run("destroy", "--auto-approve", "--allow-data-loss")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert rig.vms() == []
    assert traces(sand.state_dir, needles) == {}
    assert deletes_in_the_trail(sand.state_dir) == {"pve-1", "pve-2"}
