"""A brokered token in none of a guest's RAM, saved state or disk, read from the host,
across the lifecycle (issue 38): one qemu TCG guest is walked through what sand does to a
VM -- a warm pool's spare provisioned, a VM's claim of it (the walk's create),
reprovision, hibernate, wake, a ``--memory`` fork, and a fork of its disk booted as a VM
of its own (the second and last boot) -- with sand's own provision (``provision``: the
spare's and the claiming VM's steps), delivery (``deliver_secrets``: the tmpfs secret and
the broker credential, drawn anew at each delivery as apply draws it) and scrub
(``scrub_memory``, what sleep runs before the RAM is saved). It clones, fetches and
pushes through the broker from the rig's token-protected HTTPS git server; after each
step QEMU dumps its whole RAM, and the dump, the state a hibernation saves, the disk
image a fork copies (overlay and backing read as one raw image), every guest process's
environment and argv and its journal (its files at the end: they persist) are grepped for
the token in each form it travels in (as is, base64 alone and in the basic-auth pair the
broker sends, URL-encoded): 0 hits.

The positive controls: the spare's machine-id and host key, the guest's broker
credential, the tmpfs secret and the cloned file's text are found where the guest holds
them, so a dump that misses what the guest holds cannot pass for clean. The guest is
restricted (QEMU user-mode ``restrict=on``): it reaches nothing but its sshd's forward
and one ``guestfwd`` to the broker, as a guest reaches the broker on the host's address.
It boots with ``init_on_free=1``, as the ``memory`` step configures a provisioned guest's
next boot.

The claim is modelled as the claiming VM's provision on the spare, which is what apply
runs once the backend renamed it: the spare is provisioned by its pool entry (the
``pool-identity`` step, no secret, no repo, no grant) from a declared golden base (the
rig's image stands for it: no machine step runs), then claimed by a VM of that pool with
its own secrets, grant and repo (the step keeps the spare's machine-id and host keys and
writes only the hostname). Not modelled here: the rename itself (PVE's config write,
``limactl rename``), the marker, the refill, a spare cloned from a base sand generalized
(the rig's image has no record of a base's keys, so the spare's step makes its own, as
on a template of one's own), and the spare's own boot (one guest plays both).

What sand's CLI adds around these steps (the plan, its output, its state, the broker's
grants per VM, a fork's or a claimed spare's own credential) is proven on netns guests:
``test_broker_guests.py``, ``test_broker_sleep.py``, ``test_pools_proxmox_guests.py``,
``test_pool_claim_lima_guests.py``; why not on this guest, in docs/credentials.md.
"""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import urllib.parse
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sand.broker.access import BrokerAccess
from sand.broker.server import BrokerServer
from sand.broker.store import VMGrants, credential_hash, update_grants
from sand.desired.bases import DesiredBase, MachineContent
from sand.desired.brokered import BrokerGrant
from sand.provision import deliver_secrets, provision, scrub_memory
from tests.e2e.test_broker_guests import GUEST_PLACES
from tests.provision.e2e_helpers import endpoint, scoped_env
from tests.provision.helpers import make_vm, repo, secret
from tests.rig.brokerrig import start_broker
from tests.rig.fixtures import QEMU_TOOLS, _unavailable
from tests.rig.gitserver import GitServer
from tests.rig.qemu import GUESTFWD_ADDRESS, QemuGuest, build_image
from tests.rig.tlscert import self_signed

# Two TCG boots (the VM's and its fork's, each given up to 900 s on a loaded machine),
# a reprovision, a hibernation and a wake, with a RAM walk after each: the suite's
# 600-s default, shorter than one of its own boots may take, cut it short under load.
pytestmark = [pytest.mark.e2e, pytest.mark.tcg, pytest.mark.timeout(2400)]

TOKEN = "rig-qemu-brokered-token-3c9a51e7d2b8"
CANARY = "canary-tmpfs-secret-qemu-0d4f7a92"  # a secret delivered to tmpfs, not brokered
MARK = "held-by-a-process-qemu-58e1c3"  # no secret: what a saved RAM must hold
TEXT = "cloned through the broker 7f3e21"
BROKER_PORT = 8080  # where the guest's guestfwd is, at GUESTFWD_ADDRESS
VM = "q-1"
SPARE = "agents-spare-1"  # the warm pool's spare the VM claims
# The VM's broker credential as each delivery draws it anew.
CREATED, REPROVISIONED = "vm-credential-create-6b2e90f4a1c7", "vm-credential-reprovision-1f8a"
WOKEN, FORKED = "vm-credential-wake-92c7d0", "vm-credential-forked-source-3b"
FORK = "vm-credential-the-fork-own-c4e8"


def forms(token: str) -> set[str]:
    """The token as each of its encodings could be left behind."""
    return {
        token,
        base64.b64encode(token.encode()).decode(),
        base64.b64encode(f"x-access-token:{token}".encode()).decode(),  # the broker's header
        urllib.parse.quote(token, safe=""),
    }


CHUNK = 32 << 20


def held(path: Path, needles: set[str]) -> set[str]:
    """Which of ``needles`` the file at ``path`` holds (a RAM dump, a saved state, a
    disk image): one read of it, each chunk overlapping the next by a needle's length."""
    words = {n: n.encode() for n in needles}
    overlap = max(map(len, words.values())) - 1
    found: set[str] = set()
    with path.open("rb") as fh:
        tail = b""
        while chunk := fh.read(CHUNK):
            window = tail + chunk
            found |= {n for n, w in words.items() if w in window}
            tail = window[-overlap:]
    return found


@pytest.fixture
def rig(tmp_path: Path, rig_rootfs: Path) -> Iterator[tuple[QemuGuest, GitServer, BrokerServer]]:
    _unavailable(QEMU_TOOLS)
    build_image()
    cert, key = self_signed(tmp_path, "127.0.0.1")
    server = GitServer(TOKEN, host="127.0.0.1", tls=(cert, key)).start()
    project = server.create_repo("project", {"README.md": TEXT + "\n"})
    grant = BrokerGrant("GH_TOKEN", (project,), ("agent/*",))
    broker = start_broker(tmp_path / "broker", VM, "unused", grant, TOKEN, cert)
    port = broker.server_address[1]
    guest = QemuGuest(
        memory_mb=768,
        guestfwds=[(BROKER_PORT, "127.0.0.1", port)],
        kernel_args=("init_on_free=1",),
    )
    try:
        guest.start(ready_timeout=900)  # a TCG boot on a loaded machine takes minutes
        yield guest, server, broker
    finally:
        guest.stop()
        broker.shutdown()
        broker.server_close()
        server.stop()


def as_user(guest: QemuGuest, script: str) -> subprocess.CompletedProcess[bytes]:
    """``script`` in a login shell of the guest's user."""
    return guest.run_root(["runuser", "-l", guest.user, "-c", script], timeout=300)


def push(guest: QemuGuest, branch: str) -> None:
    script = (
        f"cd ~/p && git checkout -qB {shlex.quote(branch)} && date +%s%N > w.txt && "
        "git add w.txt && git -c user.name=a -c user.email=a@b commit -qm w && "
        f"GIT_TERMINAL_PROMPT=0 git push -q origin {shlex.quote(branch)}"
    )
    done = as_user(guest, script)
    assert done.returncode == 0, done.stderr


def refused(guest: QemuGuest, credential: str) -> bool:
    """Whether the broker refuses a fetch from the guest made with ``credential``."""
    helper = f"!f() {{ echo username=x; echo password={credential}; }}; f"
    script = (
        "cd ~/p && GIT_TERMINAL_PROMPT=0 git -c credential.helper= "
        f"-c credential.helper={shlex.quote(helper)} fetch -q origin"
    )
    done = as_user(guest, script)
    return done.returncode != 0 and b"Authentication failed" in done.stderr


def copy(guest: QemuGuest, dest: Path, fmt: str) -> Path:
    """The guest's disk, overlay and backing as one image (shared: the guest still runs,
    as a PVE source does while it is cloned)."""
    convert = ["qemu-img", "convert", "-U", "-O", fmt, str(guest.disk_path), str(dest)]
    subprocess.run(convert, check=True, timeout=600)
    return dest


def secret_files(guest: QemuGuest) -> list[str]:
    """The files of the tmpfs places a VM's secrets and broker credential are delivered to
    (not the ledger's digest of what was delivered there: no value)."""
    find = "find /run/user /dev/shm -path '*sand*' -type f ! -path '*/.ledger/*'; true"
    done = guest.run_root(["sh", "-c", find])
    return done.stdout.decode().split()


def in_guest(guest: QemuGuest, text: str, *, files: bool = False) -> list[str]:
    """What in the guest holds ``text``: its journal, each process's environment and argv
    and, with ``files``, its files (tmpfs included). The text on stdin, never in argv."""
    script = (
        'read -r p; journalctl -b -o export --no-pager | grep -qaF -e "$p" && echo journal; '
        + (f'grep -rlsF -e "$p" {GUEST_PLACES}; ' if files else "")
        + 'for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do grep -lsF -e "$p" "$f"; done'
        + "; true"
    )
    done = guest.run_root(["sh", "-c", script], input=(text + "\n").encode(), timeout=600)
    assert done.returncode == 0, done.stderr
    return [p for p in done.stdout.decode().split() if not p.startswith("/proc/self/")]


async def test_a_brokered_token_is_in_no_ram_saved_state_or_disk_across_the_lifecycle(
    rig, tmp_path: Path
) -> None:
    guest, server, broker = rig
    target = endpoint(guest, alias=f"qemu-{guest.id}")
    upstream = server.url_for("project")
    (grant,) = broker.state.grants[VM].grants
    # A golden base: the rig's image holds what the machine steps would install, so a
    # pool VM runs its own steps only, as a spare cloned from a pool's golden image does.
    golden = MachineContent(guest.user, (), ("claude",), False)
    base = DesiredBase("demo", "laptop", "rig", True, "rig", golden)
    vm = make_vm(
        name=VM,
        pool="agents",
        base=base,
        user=guest.user,
        secrets=(secret("API", "~/work", "API_KEY"),),
        repos=(repo("project", upstream, "~/p", "GH_TOKEN"),),
        brokered=(grant,),
    )
    values = {"API": CANARY, "GH_TOKEN": TOKEN}
    token = forms(TOKEN)

    def granted(credential: str, name: str) -> BrokerAccess:
        """A new broker credential granted to ``name`` (the one before it dies)."""
        entry = VMGrants(credential_hash(credential), "", vm.brokered)
        update_grants(broker.state.directory, name, entry)
        broker.state.reload()
        return BrokerAccess(f"http://{GUESTFWD_ADDRESS}:{BROKER_PORT}", credential)

    async def deliver(credential: str, to: QemuGuest = guest, name: str = VM) -> None:
        """What apply does at a reprovision, a wake: a new broker credential granted,
        then the VM's secrets delivered."""
        where = endpoint(to, alias=f"qemu-{to.id}")
        await deliver_secrets(where, vm, values, broker=granted(credential, name))

    def ram(step: str, of: QemuGuest = guest) -> Path:
        return of.dump_memory(tmp_path / f"ram-{step}.elf")

    def found(path: Path, *also: str) -> set[str]:
        """What of the token's forms and of ``also`` the file holds; then it goes."""
        try:
            return held(path, token | set(also))
        finally:
            path.unlink()

    # The spare: provisioned for its pool role as apply fills a warm pool (the spare's
    # entry: the pool-identity step, no secret, no repo, no grant). The rig's image has
    # no record of a base's keys, so the step makes its machine-id and host keys.
    spare = make_vm(name=SPARE, pool="agents", spare=True, base=base, user=guest.user)
    filled = await provision(target, spare, {})
    assert "pool-identity" in filled.ran, filled.ran
    guest.pin_new_host_key()
    machine_id = guest.run_root(["cat", "/etc/machine-id"], check=True).stdout.decode().strip()
    host_key = guest.host_public_key.split()[1]
    assert SPARE not in broker.state.grants
    assert secret_files(guest) == []
    # The control: the identity the spare's step made is in the dump; the token is not.
    assert found(ram("spare"), machine_id, host_key) == {machine_id, host_key}
    assert in_guest(guest, TOKEN) == []

    # The claim, the walk's create: the claiming VM's own provision on the spare (apply
    # runs it once the backend renamed the spare): its identity kept, its hostname
    # written, its secrets, its own broker credential, its repo cloned through the broker.
    claim = await provision(target, vm, values, broker=granted(CREATED, VM))
    assert [c for c in claim.changes if c.startswith("pool-identity")] == [
        f"pool-identity: hostname {VM}"
    ]
    # run_root still answers: the host key the rig pinned for the spare is unchanged.
    assert guest.run_root(["cat", "/etc/machine-id"]).stdout.decode().strip() == machine_id
    assert guest.run_root(["hostname"]).stdout.decode().strip() == VM
    assert any(f.endswith("/git/broker") for f in secret_files(guest))  # its credential
    work = "cd ~/p && GIT_TERMINAL_PROMPT=0 git fetch -q origin && cat README.md"
    fetched = as_user(guest, work)
    assert fetched.returncode == 0, fetched.stderr
    assert fetched.stdout.decode().strip() == TEXT
    push(guest, "agent/create")
    # A process of the user's holds a value that is no secret: the saved state's control.
    hold = f"MARK={MARK} setsid sleep 3600 </dev/null >/dev/null 2>&1 &"
    assert as_user(guest, hold).returncode == 0
    ops = broker.state.directory / "operations.jsonl"
    done = {(o["vm"], o["service"], o["allowed"]) for o in map(json.loads, ops.open())}
    assert done == {(VM, "git-upload-pack", True), (VM, "git-receive-pack", True)}
    assert server.request_log and all(ok for _path, ok in server.request_log)
    # The controls: what the guest holds is in the dump; the token in no form.
    assert found(ram("claim"), CREATED, CANARY, TEXT) == {CREATED, CANARY, TEXT}
    assert in_guest(guest, TOKEN) == []
    assert in_guest(guest, MARK) != []  # the control: a process's environment is read

    # Reprovision (the rules changed): a new credential; the old one is refused.
    vm = replace(vm, brokered=(replace(grant, push=("agent/*", "review/*")),))
    await deliver(REPROVISIONED)
    push(guest, "review/reprovision")
    assert refused(guest, CREATED)
    assert found(ram("reprovision"), REPROVISIONED) == {REPROVISIONED}
    assert in_guest(guest, TOKEN) == []

    # Hibernate: the scrub, then the RAM saved as PVE saves it to the vmstate volume:
    # the process's value is in it (the control), neither the credential nor the secret.
    assert (await scrub_memory(target, vm)).left == ()
    state = guest.save_state(tmp_path / "vm-1-state-suspend.raw")
    assert found(state, MARK, REPROVISIONED, CANARY) == {MARK}

    # Wake: the guest runs again, its secrets delivered anew with a new credential.
    guest.resume()
    assert scoped_env(guest, "~/work", "API_KEY") is None  # the scrub removed it
    await deliver(WOKEN)
    assert scoped_env(guest, "~/work", "API_KEY") == CANARY
    push(guest, "agent/woken")
    assert refused(guest, REPROVISIONED)
    assert found(ram("wake"), WOKEN, CANARY) == {WOKEN, CANARY}
    assert in_guest(guest, TOKEN) == []

    # A ``--memory`` fork: the source scrubbed, its RAM saved in the snapshot's vmstate.
    assert (await scrub_memory(target, vm)).left == ()
    state = guest.save_state(tmp_path / "vm-1-state-fork.raw")
    assert found(state, MARK, WOKEN, CANARY) == {MARK}
    guest.resume()
    await deliver(FORKED)

    # And the disk a fork's clone copies, read raw: the checkout is on it (the control),
    # the tmpfs's credential and secret are not.
    guest.run_root(["sync"], check=True)
    disk = tmp_path / "fork-disk.raw"
    copy(guest, disk, "raw")
    assert found(disk, TEXT, FORKED, CANARY) == {TEXT}
    assert in_guest(guest, TOKEN, files=True) == []

    # The fork: a clone of that disk booted as a VM of its own, delivered by its own
    # entry (the repo, no tmpfs secret) with its own credential. Its RAM holds that
    # credential and the checkout it reads, none of the source's, nor the token.
    clone = copy(guest, tmp_path / "fork-disk.qcow2", "qcow2")
    guest.stop()  # one TCG guest at a time on the test machine
    fork = QemuGuest(
        memory_mb=768,
        guestfwds=[(BROKER_PORT, "127.0.0.1", broker.server_address[1])],
        kernel_args=("init_on_free=1",),
        backing=clone,
    )
    try:
        fork.start(ready_timeout=900)
        vm = replace(vm, name="try-1", pool=None, secrets=())
        await deliver(FORK, fork, "try-1")
        assert not scoped_env(fork, "~/work", "API_KEY")
        fetched = as_user(fork, "cd ~/p && GIT_TERMINAL_PROMPT=0 git fetch -q && cat README.md")
        assert fetched.returncode == 0, fetched.stderr
        assert fetched.stdout.decode().strip() == TEXT
        push(fork, "agent/from-the-fork")
        source = {CREATED, REPROVISIONED, WOKEN, FORKED, CANARY}
        assert found(ram("fork", fork), FORK, TEXT, *source) == {FORK, TEXT}
        assert in_guest(fork, TOKEN, files=True) == []
    finally:
        fork.stop()

    branches = {"agent/create", "review/reprovision", "agent/woken", "agent/from-the-fork"}
    assert branches <= set(server.branches("project"))
    for path in broker.state.directory.iterdir():
        assert held(path, token) == set(), path
