"""Golden bases on fakepve with real guests: built once, frozen, VMs cloned from them.

fakepve holds the API side (the template in the pool, its marker and tags, the clones);
real netns guests hold the disks (``tests/rig/clones.py``): the base's build machine is
a guest provisioned for real (its packages fetched from the rig's apt mirror, whose log
shows every download), frozen when PVE makes it a template, and each VM cloned from the
base starts from that frozen disk. What each test asserts is read off the guests (their
packages, agents, ledger and step log), the mirror's log, and PVE's own state.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from tests.cli.helpers import Sand
from tests.provision.e2e_helpers import out, root, stand_in_agents
from tests.rig.clones import LayeredGuests, sand_block

if TYPE_CHECKING:
    from pathlib import Path

    from tests.rig.workbench import AptMirror

pytestmark = pytest.mark.e2e

STEP_LOG = "/var/lib/sand/step-log"
MACHINE_STEPS = ("packages", "toolchain", "agents")


# An image step installing a tool the way install scripts do (no explicit modes).
TOOL = "printf '#!/bin/sh\\necho tool ran\\n' > /usr/local/bin/tool && chmod +x /usr/local/bin/tool"


# An image step logging an agent in on the build machine (as a person might by hand).
LOGIN = (
    'mkdir -p /home/claude/.claude && echo \'{"token": "canary"}\' '
    "> /home/claude/.claude/.credentials.json"
)


def _manifest(rig, vms, images, **defaults):
    data = rig.manifest(vms, defaults={"provision": True, "timezone": "Etc/UTC", **defaults})
    data["images"] = images
    return data


def _env(tmp_path: Path) -> dict[str, str]:
    return {"SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents"))}


def _log(guest) -> list[list[str]]:
    return [line.split() for line in root(guest, "cat", STEP_LOG).splitlines()]


def _debs(mirror: AptMirror, name: str) -> int:
    return sum(1 for r in mirror.requests if f"/{name}_" in r)


def _templates(rig) -> list:
    return [
        vm
        for vm in rig.templates()
        if sand_block(vm.config.get("description")).get("kind") == "golden"
    ]


@pytest.fixture
def guests(fakepve_server, bare_rootfs, rig_rootfs, apt_mirror):
    rig = fakepve_server
    public = (rig.identity.with_name(rig.identity.name + ".pub")).read_text().strip()
    made = LayeredGuests(
        rig,
        public_key=public,
        bare=bare_rootfs,
        workbench=rig_rootfs,
        mirror=apt_mirror,
        base_from_bare=False,
    )
    try:
        yield made
    finally:
        made.stop()


def test_vms_of_a_golden_image_have_its_content_without_running_its_steps(
    tmp_path, fakepve_server, guests, apt_mirror
):
    rig = fakepve_server
    sand = Sand(tmp_path)
    # The build machine's DHCP client saved a lease (as dhclient does at boot).
    lease = "mkdir -p /var/lib/dhcp && echo 'lease {}' > /var/lib/dhcp/dhclient.eth0.leases"
    images = {
        "wb": {
            "packages": ["tini"],
            "agents": ["claude", "codex"],
            "steps": [
                {"name": "dhcp", "run": lease},
                {"name": "tool", "run": TOOL},
                {"name": "login", "run": LOGIN},
            ],
        }
    }
    sand.write(_manifest(rig, [{"name": "a"}, {"name": "b"}], images, image="wb"))
    env = _env(tmp_path)

    plan = sand.run("plan", env=env)
    assert plan.returncode == 0, plan.stderr
    assert '# golden base "wb" (pve) will be built' in plan.stdout
    assert "made from it this run: a, b" in plan.stdout
    assert "it holds no secret and no agent login" in plan.stdout

    with guests:
        proc = sand.run("apply", "--auto-approve", env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
    assert "golden base wb (pve): build: built as" in proc.stdout

    # PVE: one template in the pool carrying the base's fingerprint; both VMs cloned
    # from it (their tags say so), none from the plain template.
    (template,) = _templates(rig)
    block = sand_block(template.config["description"])
    assert block["state"] == "ready" and template.pool == rig.pool
    fingerprint = block["fingerprint"]
    assert f"sand-golden-{fingerprint}" in template.config["tags"]
    assert "sand-golden-new" not in template.config["tags"]
    for name in ("a", "b"):
        (vm,) = rig.vms_named(name)
        assert f"sand-from-{fingerprint}" in vm.config["tags"]
        assert sand_block(vm.config["description"])["base"] == fingerprint

    # The package came from the mirror once: for the base, never for a VM.
    assert _debs(apt_mirror, "tini") == 1
    for name in ("a", "b"):
        guest = guests.guest_of(name)
        status = root(guest, "dpkg-query", "-W", "-f=${db:Status-Abbrev}", "tini")
        assert status.startswith("ii"), status
        assert "stand-in codex" in out(guest, "codex --version")
        # What an image step installs is usable by the login user, as from a root shell.
        assert out(guest, "tool") == "tool ran\n"
        log = _log(guest)
        # The base ran its machine steps (its log is on the disk the VM was cloned from)...
        ran_by_base = {w[2] for w in log if w[1] == "base:wb" and w[3] == "ran"}
        assert set(MACHINE_STEPS) <= ran_by_base
        # ...and the VM never ran one of them; its own steps it ran itself.
        own = {w[2]: w[3] for w in log if w[1] == f"vm:{name}"}
        assert not set(MACHINE_STEPS) & set(own), own
        assert own["user"] == own["home"] == own["locale"] == "ran"
        # Its ledger holds the base's machine records and its own.
        ledger = set(root(guest, "ls", "/var/lib/sand/ledger").split())
        assert {*MACHINE_STEPS, "user", "home", "locale"} <= ledger
        # A machine of its own: the base's machine id was emptied before it was frozen.
        assert root(guest, "cat", "/etc/machine-id").strip() == ""
        # ...and the base's DHCP lease removed: no clone asks for the base's address.
        assert root(guest, "ls", "-A", "/var/lib/dhcp").split() == []
        # ...and the login made on the build machine: its clones copy no login.
        # (The step ran there: the directory it made is on the VM's disk.)
        assert root(guest, "ls", "-A", "/home/claude/.claude").split() == []

    again = sand.run("plan", "--detailed-exitcode", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "No changes." in again.stdout


def test_a_changed_image_is_rebuilt_once_for_many_vms_and_old_vms_stay_until_asked(
    tmp_path, fakepve_server, guests, apt_mirror
):
    rig = fakepve_server
    sand = Sand(tmp_path)
    env = _env(tmp_path)
    vms = [{"name": f"w{i}", "memory": "1GiB"} for i in range(3)]
    images = {"wb": {"packages": ["tini"], "agents": ["claude"]}}
    sand.write(_manifest(rig, vms, images, image="wb"))
    with guests:
        proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
        first = {vm.name: vm.vmid for vm in rig.vms() if not vm.template}
        (old,) = _templates(rig)

        # The image changes: one base is built, the three VMs stay as they are.
        images["wb"]["steps"] = [{"name": "note", "run": "echo v2 > /etc/sand-image-note"}]
        sand.write(_manifest(rig, vms, images, image="wb"))
        plan = json.loads(sand.run("plan", "--json", env=env).stdout)
        assert [b["action"] for b in plan["bases"]] == ["build"]
        assert sorted(c["vm"] for c in plan["changes"] if c.get("out_of_date")) == [
            "w0",
            "w1",
            "w2",
        ]
        rig.clear_log()
        proc = sand.run("apply", "--auto-approve", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
        templates = _templates(rig)
        assert len(templates) == 2  # the old one is kept: VMs were made from it
        assert len(rig.requests("POST", contains="/template")) == 1
        assert {vm.name: vm.vmid for vm in rig.vms() if not vm.template} == first
        text = sand.run("plan", env=env).stdout
        assert "Out of date: made from a golden image that changed since" in text
        assert "No changes. Your VMs match the manifest, but for the ones out of date" in text

        # rebuild: onBaseChange replaces them from the new base (no second build), and the
        # old base goes in the same run: no VM is made from it any more.
        sand.write(_manifest(rig, vms, images, image="wb", rebuild="onBaseChange"))
        rig.clear_log()
        proc = sand.run("apply", "--auto-approve", "--allow-mass-delete", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr + "\n".join(guests.errors)
        assert rig.requests("POST", contains="/template") == []
        (current,) = _templates(rig)
        assert current.vmid != old.vmid
        now = {vm.name: vm.vmid for vm in rig.vms() if not vm.template}
        assert sorted(now) == ["w0", "w1", "w2"] and not set(now.values()) & set(first.values())
        for name in now:
            guest = guests.guest_of(name)
            assert root(guest, "cat", "/etc/sand-image-note") == "v2\n"
            assert not [w for w in _log(guest) if w[1] == f"vm:{name}" and w[2] == "image-note"]
    assert _debs(apt_mirror, "tini") == 2  # once per base build, never per VM
    final = sand.run("plan", "--detailed-exitcode", env=env)
    assert final.returncode == 0 and "No changes. Your VMs match the manifest." in final.stdout
