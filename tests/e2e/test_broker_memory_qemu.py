"""A brokered token in none of a guest's RAM or disk, read from the host (issue 38): a
qemu TCG guest clones and fetches through the broker from the rig's token-protected
HTTPS git server, then its whole RAM is dumped by QEMU (what a hibernation or a
``--memory`` fork's snapshot saves) and its disk image read, and both are grepped.

The positive controls: the guest's broker credential and the cloned file's text are
found in the same dump, so a dump that misses what the guest holds cannot pass for
clean. The guest is restricted (QEMU user-mode ``restrict=on``): it reaches nothing but
its sshd's forward and one ``guestfwd`` to the broker, as a guest reaches the broker
on the host's address.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.broker.server import BrokerServer
from sand.desired.brokered import BrokerGrant
from tests.e2e.test_scrub_memory_qemu import hits, ram_hits
from tests.rig.brokerrig import start_broker
from tests.rig.fixtures import QEMU_TOOLS, _unavailable
from tests.rig.gitserver import GitServer
from tests.rig.qemu import GUESTFWD_ADDRESS, QemuGuest, build_image
from tests.rig.tlscert import self_signed

pytestmark = [pytest.mark.e2e, pytest.mark.tcg]

TOKEN = "rig-qemu-brokered-token-3c9a51e7d2b8"
CREDENTIAL = "vm-credential-qemu-6b2e90f4a1c7"
TEXT = "cloned through the broker 7f3e21"
BROKER_PORT = 8080  # where the guest's guestfwd is, at GUESTFWD_ADDRESS


@pytest.fixture
def rig(tmp_path: Path, rig_rootfs: Path) -> Iterator[tuple[QemuGuest, GitServer, BrokerServer]]:
    _unavailable(QEMU_TOOLS)
    build_image()
    cert, key = self_signed(tmp_path, "127.0.0.1")
    server = GitServer(TOKEN, host="127.0.0.1", tls=(cert, key)).start()
    project = server.create_repo("project", {"README.md": TEXT + "\n"})
    grant = BrokerGrant("GH_TOKEN", (project,), ("agent/*",))
    broker = start_broker(tmp_path / "broker", "q-1", CREDENTIAL, grant, TOKEN, cert)
    port = broker.server_address[1]
    guest = QemuGuest(memory_mb=768, guestfwds=[(BROKER_PORT, "127.0.0.1", port)])
    try:
        guest.start(ready_timeout=900)  # a TCG boot on a loaded machine takes minutes
        yield guest, server, broker
    finally:
        guest.stop()
        broker.shutdown()
        broker.server_close()
        server.stop()


def as_user(
    guest: QemuGuest, script: str, input: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``script`` in a login shell of the guest's user."""
    return guest.run_root(["runuser", "-l", guest.user, "-c", script], input=input, timeout=300)


def test_a_brokered_clone_leaves_no_token_in_the_guests_ram_or_disk(rig, tmp_path: Path):
    guest, server, broker = rig
    upstream = server.base_url  # https://127.0.0.1:<port>
    broker_url = f"http://{GUESTFWD_ADDRESS}:{BROKER_PORT}"
    via = f"{broker_url}/{upstream.removeprefix('https://')}/"
    # What the secrets step writes: the credential in tmpfs, git sent to the broker.
    helper = "!f() { echo username=x; printf 'password=%s\\n' \"$(cat /dev/shm/cred)\"; }; f"
    setup = (
        "umask 077; cat > /dev/shm/cred; "
        f"git config --global url.{shlex.quote(via)}.insteadOf {shlex.quote(upstream + '/')}; "
        f"git config --global credential.{shlex.quote(broker_url)}.helper {shlex.quote(helper)}"
    )
    done = as_user(guest, setup, input=CREDENTIAL.encode())
    assert done.returncode == 0, done.stderr
    work = (
        f"GIT_TERMINAL_PROMPT=0 git clone -q {shlex.quote(server.url_for('project'))} ~/p"
        " && cd ~/p && GIT_TERMINAL_PROMPT=0 git fetch -q origin && cat README.md"
    )
    cloned = as_user(guest, work)
    assert cloned.returncode == 0, cloned.stderr
    assert cloned.stdout.decode().strip() == TEXT
    assert server.request_log and all(ok for _path, ok in server.request_log)
    # Through the broker, which attached the token (the guest reaches nothing else).
    log = broker.state.directory / "operations.jsonl"
    ops = [json.loads(line) for line in log.read_text().splitlines()]
    assert ops and {(o["vm"], o["service"], o["allowed"]) for o in ops} == {
        ("q-1", "git-upload-pack", True)
    }

    dump = guest.dump_memory(tmp_path / "ram.elf")
    try:
        # The controls: what the guest does hold is in the dump.
        assert hits(dump, CREDENTIAL) > 0 and hits(dump, TEXT) > 0
        assert hits(dump, TOKEN) == 0
    finally:
        dump.unlink()
    guest.run_root(["sync"], check=True)
    assert hits(guest.disk_path, TEXT) > 0  # the checkout is on the disk: it is read
    assert hits(guest.disk_path, TOKEN) == 0
    assert ram_hits(guest, tmp_path, TOKEN) == 0
