"""When sand made a VM is recorded on the VM once and kept across every later write (an
``expires:`` duration counts from it): PVE tags and description on fakepve, the Lima
sidecar on the limactl stand-in."""

from __future__ import annotations

import json
import time

from sand.backends.proxmox import description as desc
from sand.backends.proxmox import marker as mk
from tests.backends.lima.test_cli import Cli
from tests.cli.helpers import Sand


def pve_created_at(vm) -> tuple[int, int]:
    """(the tag's, the description block's) creation time of a fakepve VM."""
    block = desc.parse_block(vm.config.get("description")) or {}
    return mk.parse_tags(vm.config.get("tags")).created_at, desc.created_at_of(block)


def past_second(stamp: int) -> None:
    """Return once the clock's whole second is past ``stamp`` (times are kept in whole
    seconds: a later write in the same second would prove nothing)."""
    deadline = time.monotonic() + 5
    while int(time.time()) <= stamp:
        assert time.monotonic() < deadline, "the clock did not move"
        time.sleep(0.01)


def test_proxmox_records_the_creation_time_once(tmp_path, fakepve_server):
    rig, sand = fakepve_server, Sand(tmp_path)
    sand.write(rig.manifest([{"name": "a", "memory": "1GiB"}]))
    before = int(time.time())
    assert sand.run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    tag, block = pve_created_at(vm)
    assert before <= tag <= int(time.time()) and block == tag
    # An update in place and the marker written after it keep it.
    past_second(tag)
    sand.write(rig.manifest([{"name": "a", "memory": "2GiB"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    assert int(vm.config["memory"]) == 2048 and pve_created_at(vm) == (tag, tag)
    # A replacement is a new VM: its clock starts again.
    done = sand.run("apply", "--auto-approve", "--replace", "a", "--allow-data-loss")
    assert done.returncode == 0, done.stdout + done.stderr
    (new,) = rig.vms()
    assert pve_created_at(new)[0] > tag and pve_created_at(new)[0] == pve_created_at(new)[1]


def test_lima_records_the_creation_time_once(tmp_path):
    cli = Cli(tmp_path)

    def sidecar() -> dict:
        return json.loads((cli.standin.instance_dir("a") / "sand-marker.json").read_text())

    cli.write("  - name: a\n")
    before = int(time.time())
    assert cli.sand("apply", "--auto-approve").returncode == 0
    made = sidecar()["created_at"]
    assert before <= made <= int(time.time())
    past_second(made)
    cli.write("  - name: a\n    cpus: 1\n")
    res = cli.sand("apply", "--auto-approve")
    assert res.returncode == 0, res.stdout + res.stderr
    assert cli.standin.read_yaml("a")["cpus"] == 1 and sidecar()["created_at"] == made
