"""The ``memory`` step (bundle/memory.sh) on a real guest (netns rig): the kernel of a
guest booted through grub zeroes the memory it frees from its next boot
(``init_on_free=1``), so a secret's copies in freed pages are not in a RAM image a
hibernation saves. The guest's ``update-grub`` is a stand-in that records what grub
would read; a guest without one is left as it is."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sand.provision import provision
from tests.provision.e2e_helpers import endpoint, stand_in_agents
from tests.provision.helpers import make_vm

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest

pytestmark = pytest.mark.e2e

CONF = "/etc/default/grub.d/60-sand-memory.cfg"
# What update-grub would make of the drop-ins: the command line they give, in a file.
STAND_IN = """#!/bin/sh
set -e
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
for f in /etc/default/grub.d/*.cfg; do . "$f"; done
printf '%s\\n' "$GRUB_CMDLINE_LINUX_DEFAULT" >>/var/tmp/grub-cmdline
"""


async def test_a_guest_with_grub_boots_next_with_init_on_free(
    netns_guest: MakeGuest, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("SAND_AGENT_SOURCE", str(stand_in_agents(tmp_path / "agents")))
    guest = netns_guest()
    vm = make_vm(user=guest.user)
    without = await provision(endpoint(guest), vm, {})
    assert [s.changes for s in without.steps if s.name == "memory"] == [()]
    assert guest.run_root(["test", "-e", CONF]).returncode == 1

    # The guest gets grub; the step's ledger record goes, so the step runs again.
    script = "cat >/usr/sbin/update-grub && chmod 755 /usr/sbin/update-grub"
    guest.run_root(["sh", "-c", script], input=STAND_IN.encode(), check=True)
    guest.run_root(["rm", "/var/lib/sand/ledger/memory"], check=True)
    report = await provision(endpoint(guest), vm, {})
    (memory,) = [s for s in report.steps if s.name == "memory"]
    assert memory.changes == (f"{CONF}: init_on_free=1 from the next boot",)
    assert guest.read_file("/var/tmp/grub-cmdline") == b"quiet init_on_free=1\n"
    assert guest.run_root(["stat", "-c", "%a %U", CONF]).stdout == b"644 root\n"
