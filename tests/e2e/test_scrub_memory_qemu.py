"""Nothing secret in saved memory, read from the host: a qemu TCG guest's whole RAM
dumped by QEMU (QMP ``dump-guest-memory``: what a hibernation or a ``--memory`` fork's
snapshot saves) and its disk image, grepped for a canary secret sand delivered.

Each check has its positive control: the canary is found in a dump taken before the
scrub (and while a process holds it), so a dump that misses it cannot pass for clean.
The guest boots with ``init_on_free=1``, as the ``memory`` step configures a provisioned
guest's next boot; the scrub says so when a guest runs without it.
"""

from __future__ import annotations

import mmap
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.desired import DesiredVM
from sand.guest.endpoint import GuestEndpoint
from sand.provision import deliver_secrets, scrub_memory
from tests.provision.e2e_helpers import endpoint, scoped_env
from tests.provision.helpers import make_vm, secret
from tests.rig.fixtures import QEMU_TOOLS, _unavailable
from tests.rig.qemu import QemuGuest, build_image

pytestmark = [pytest.mark.e2e, pytest.mark.tcg]


@pytest.fixture(scope="module")
def guest(rig_rootfs: Path) -> Iterator[QemuGuest]:
    """One guest for the module (a TCG boot is slow), zeroing the memory it frees."""
    _unavailable(QEMU_TOOLS)
    build_image()
    booted = QemuGuest(memory_mb=768, kernel_args=("init_on_free=1",))
    booted.start(ready_timeout=900)  # a TCG boot on a loaded machine takes minutes
    try:
        yield booted
    finally:
        booted.stop()


def hits(path: Path, needle: str) -> int:
    """How many times ``needle`` occurs in the file at ``path`` (a RAM dump, a disk)."""
    if path.stat().st_size == 0:
        return 0
    found, at, word = 0, 0, needle.encode()
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        while (at := data.find(word, at)) != -1:
            found, at = found + 1, at + 1
    return found


def ram_hits(guest: QemuGuest, tmp_path: Path, needle: str) -> int:
    dump = guest.dump_memory(tmp_path / f"ram-{secrets.token_hex(4)}.elf")
    try:
        return hits(dump, needle)
    finally:
        dump.unlink()


async def delivered(guest: QemuGuest) -> tuple[str, DesiredVM, GuestEndpoint]:
    """A fresh canary delivered as secret API (``API_KEY`` in ``~/work``)."""
    canary = f"canary-{secrets.token_hex(16)}"
    vm = make_vm(user=guest.user, secrets=(secret("API", "~/work", "API_KEY"),))
    target = endpoint(guest, alias=f"qemu-{guest.id}")
    await deliver_secrets(target, vm, {"API": canary})
    return canary, vm, target


async def test_the_scrub_leaves_no_delivered_secret_in_the_guests_ram_or_disk(
    guest: QemuGuest, tmp_path: Path
) -> None:
    canary, vm, target = await delivered(guest)
    assert scoped_env(guest, "~/work", "API_KEY") == canary
    # The positive control: delivered, the value is in the guest's RAM.
    before = ram_hits(guest, tmp_path, canary)
    assert before > 0

    scrubbed = await scrub_memory(target, vm)
    assert scrubbed.left == ()  # nothing runs with it; freed pages are zeroed
    assert ram_hits(guest, tmp_path, canary) == 0, f"{before} copies before the scrub"
    # Never on the disk either (tmpfs only): the VM's disk image, as a fork copies it.
    guest.run_root(["sync"], check=True)
    assert hits(guest.disk_path, canary) == 0
    assert scoped_env(guest, "~/work", "API_KEY") is None

    # Delivered again (as a wake does), the guest holds it once more.
    await deliver_secrets(target, vm, {"API": canary})
    assert scoped_env(guest, "~/work", "API_KEY") == canary


async def test_a_secret_in_a_running_process_is_said_and_goes_with_the_process(
    guest: QemuGuest, tmp_path: Path
) -> None:
    canary, vm, target = await delivered(guest)
    # A shell that entered the scope: direnv exported the value into its environment.
    script = (
        'read -r value; API_KEY=$value setsid runuser -u "$1" -- sleep 3600 '
        "</dev/null >/dev/null 2>&1 &"
    )
    started = guest.run_root(["sh", "-c", script, "-", guest.user], input=canary.encode() + b"\n")
    assert started.returncode == 0, started.stderr

    scrubbed = await scrub_memory(target, vm)
    assert scrubbed.left == ("API_KEY in a running process's environment",)
    # What sand cannot remove is still there: a hibernation would save it (hence a stop).
    assert ram_hits(guest, tmp_path, canary) > 0
    guest.run_root(["pkill", "-u", guest.user, "-x", "sleep"], check=True)
    # Once the process ends its memory is freed, and zeroed as it is freed.
    assert (await scrub_memory(target, vm)).left == ()
    assert ram_hits(guest, tmp_path, canary) == 0


async def test_a_forks_copy_keeps_no_login_in_its_disk_image(
    guest: QemuGuest, tmp_path: Path
) -> None:
    # The fork step's own script (the bundle is on the guest once sand delivered to it),
    # run on the guest's disk as on a fork's copy of its source's.
    await delivered(guest)
    canary = f"canary-{secrets.token_hex(16)}"
    login = f"/home/{guest.user}/.claude/.credentials.json"
    plant = f'mkdir -p "$(dirname {login})" && read -r v && echo "$v" > {login} && sync'
    as_user = ["runuser", "-u", guest.user, "--", "sh", "-c", plant]
    guest.run_root(as_user, input=canary.encode() + b"\n", check=True)
    # The positive control: written and synced, the login is in the disk image.
    assert hits(guest.disk_path, canary) > 0

    fork = ["/bin/bash", "/usr/local/lib/sand/bundle/fork.sh", "fork/try-1", "try-1"]
    ran = guest.run_root(["runuser", "-u", guest.user, "--", *fork], input=b"end\0")
    assert ran.returncode == 0, ran.stderr
    assert b"claude login removed" in ran.stdout
    guest.run_root(["sync"], check=True)
    assert hits(guest.disk_path, canary) == 0
