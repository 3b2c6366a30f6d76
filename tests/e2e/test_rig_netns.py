"""The netns guest rig itself: real sshd, real keys, real namespaces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

import asyncssh
import pytest

from tests.rig import guest as guest_mod
from tests.rig.argv import ArgvWatch
from tests.rig.guest import NetnsGuest, cleanup_stale
from tests.rig.ssh import connect_options
from tests.rig.ssh import run as ssh_run

if TYPE_CHECKING:
    # Not imported at run time: pytest_plugins must import it first to rewrite asserts.
    from tests.rig.fixtures import MakeGuest


pytestmark = pytest.mark.e2e


def _netns_exists(name: str) -> bool:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return any(line.split()[0] == name for line in out.splitlines() if line.split())


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def test_two_guests_have_distinct_addresses_and_identities(netns_guest: MakeGuest) -> None:
    a, b = netns_guest(), netns_guest()
    assert a.address != b.address
    assert a.netns != b.netns
    assert a.host_public_key != b.host_public_key
    assert a.client_key_path != b.client_key_path
    # Each guest sees its own address on eth0, not the other's.
    a_addrs = a.run_root(["ip", "-o", "-4", "addr", "show", "eth0"], check=True).stdout.decode()
    assert f" {a.address}/" in a_addrs
    assert f" {b.address}/" not in a_addrs
    assert a.read_file("/etc/hostname").decode().strip() == a.hostname


async def test_ssh_with_rig_key_runs_the_tools_sand_needs(netns_guest: MakeGuest) -> None:
    for guest in (netns_guest(), netns_guest()):
        async with asyncssh.connect(**connect_options(guest)) as conn:
            ident = await conn.run("id", check=True)
            assert f"({guest.user})" in str(ident.stdout)
            assert str(ident.stdout).startswith(f"uid={guest.uid}(")
            sudo = await conn.run("sudo -n true")
            assert sudo.exit_status == 0, sudo.stderr
            root = await conn.run("sudo -n id -u", check=True)
            assert str(root.stdout).strip() == "0"
            direnv = await conn.run("direnv version", check=True)
            assert str(direnv.stdout).strip()[0].isdigit()
            git = await conn.run("git --version", check=True)
            assert str(git.stdout).startswith("git version ")


async def test_another_guests_key_is_refused(netns_guest: MakeGuest) -> None:
    a, b = netns_guest(), netns_guest()
    with pytest.raises(asyncssh.PermissionDenied):
        async with asyncssh.connect(**connect_options(a, key_path=b.client_key_path)):
            pass


async def test_unexpected_host_key_is_refused(netns_guest: MakeGuest) -> None:
    a, b = netns_guest(), netns_guest()
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        async with asyncssh.connect(**connect_options(a, host_public_key=b.host_public_key)):
            pass


async def test_root_login_needs_a_key_and_passwords_are_off(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    # Root has no authorized key, so the rig key must not get in as root.
    with pytest.raises(asyncssh.PermissionDenied):
        async with asyncssh.connect(**connect_options(guest, user="root")):
            pass
    effective = guest.run_root(["/usr/sbin/sshd", "-T"], check=True).stdout.decode()
    assert "passwordauthentication no" in effective
    assert "permitrootlogin without-password" in effective  # sshd's name for it
    assert "maxauthtries 6" in effective


async def test_secret_tmpfs_locations_exist_for_the_login_user(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    res = await ssh_run(
        guest,
        'stat -f -c %T /dev/shm; stat -f -c %T "/run/user/$(id -u)"; '
        'stat -c %a:%U "/run/user/$(id -u)"; '
        'umask 077; cat > "/run/user/$(id -u)/probe"; cat > /dev/shm/probe < /dev/null',
        input="secret-value",
    )
    shm_fs, run_user_fs, perms = str(res.stdout).split()
    assert shm_fs == "tmpfs"
    assert run_user_fs == "tmpfs"
    assert perms == f"700:{guest.user}"
    assert guest.read_file(f"/run/user/{guest.uid}/probe") == b"secret-value"
    # The guest's tmpfs is its own, not the host's /dev/shm.
    assert not Path("/dev/shm/probe").exists()


async def test_guest_pids_lists_only_guest_processes(netns_guest: MakeGuest) -> None:
    guest = netns_guest()
    async with asyncssh.connect(**connect_options(guest)) as conn:
        proc = await conn.create_process("exec sleep 4242")
        deadline = time.monotonic() + 10
        seen: list[list[str]] = []
        while time.monotonic() < deadline:
            seen = [p.argv for p in guest.guest_pids()]
            if ["sleep", "4242"] in seen:
                break
            time.sleep(0.05)
        assert ["sleep", "4242"] in seen
        pids = guest.guest_pids()
        assert any(p.pid == 1 and "sand-rig-init" in " ".join(p.argv) for p in pids)
        assert os.getpid() not in {p.host_pid for p in pids}
        # The guest's own ps agrees: it sees its processes only.
        ps = guest.run_root(["ps", "-eo", "args"], check=True).stdout.decode()
        assert "sleep 4242" in ps
        assert "pytest" not in ps
        proc.terminate()


def test_custom_login_user(netns_guest: MakeGuest) -> None:
    guest = netns_guest(user="dev")
    assert guest.user == "dev"
    passwd = guest.read_file("/etc/passwd").decode()
    assert any(line.startswith("dev:") for line in passwd.splitlines())
    sudoers = guest.run_root(["sudo", "-l", "-U", "dev"], check=True).stdout.decode()
    assert "NOPASSWD: ALL" in sudoers


def test_guest_writes_do_not_reach_the_cached_rootfs(
    netns_guest: MakeGuest, rig_rootfs: Path
) -> None:
    guest = netns_guest()
    guest.run_root(["sh", "-c", "echo x > /etc/sand-rig-probe; rm -f /etc/debian_version"])
    assert not (rig_rootfs / "etc/sand-rig-probe").exists()
    assert (rig_rootfs / "etc/debian_version").exists()
    other = netns_guest()
    assert other.run_root(["test", "-e", "/etc/sand-rig-probe"]).returncode != 0


def test_stop_removes_everything(rig_rootfs: Path) -> None:
    guest = NetnsGuest(rootfs=rig_rootfs).start()
    netns, veth, gdir = guest.netns, guest.veth, guest.dir
    assert _netns_exists(netns) and _link_exists(veth) and gdir.exists()
    guest.stop()
    assert not _netns_exists(netns)
    assert not _link_exists(veth)
    assert not gdir.exists()
    mounts = Path("/proc/self/mounts").read_text()
    assert os.fspath(gdir) not in mounts
    guest.stop()  # idempotent


def test_cleanup_stale_reaps_a_crashed_run(rig_rootfs: Path, tmp_path: Path) -> None:
    # A separate process starts a guest and is SIGKILLed: no atexit, no
    # finalizer.  PDEATHSIG takes its guest's processes down; cleanup_stale()
    # must remove the netns, veth, overlay and files it left.
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import json, sys, time
            from pathlib import Path
            from tests.rig.guest import NetnsGuest
            g = NetnsGuest(rootfs=Path({os.fspath(rig_rootfs)!r})).start()
            print(json.dumps({{"netns": g.netns, "veth": g.veth, "dir": str(g.dir)}}), flush=True)
            time.sleep(600)
            """
        )
    )
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, os.fspath(script)],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": os.fspath(root)},
    )
    assert proc.stdout is not None
    info = json.loads(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert _netns_exists(info["netns"])  # left behind, as after a real crash
    # ...but its processes died with the owner (PDEATHSIG -> PID 1 of the
    # guest's PID namespace), so nothing keeps running unsupervised.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = subprocess.run(["ip", "netns", "pids", info["netns"]], capture_output=True)
        if not pids.stdout.split():
            break
        time.sleep(0.1)
    assert not pids.stdout.split()
    # (Not asserting it is in the returned list: a concurrent test run's own
    # cleanup_stale() may legitimately reap it first.)
    cleanup_stale()
    assert not _netns_exists(info["netns"])
    assert not _link_exists(info["veth"])
    assert not Path(info["dir"]).exists()
    assert not list(guest_mod.RECORDS_DIR.glob(f"{info['netns'][len('sandg-') :]}.json"))


async def test_argv_watch_catches_a_secret_in_argv_but_not_on_stdin(
    netns_guest: MakeGuest,
) -> None:
    guest = netns_guest()
    leaked, safe = "leak-" + os.urandom(6).hex(), "safe-" + os.urandom(6).hex()
    with ArgvWatch(guest) as watch:
        # A short-lived process with the secret in argv (what sand must never
        # do) and one that receives its secret on stdin (what it does).
        await ssh_run(guest, f"sh -c 'sleep 0.2' {leaked}")
        await ssh_run(guest, "cat > /dev/shm/s; sleep 0.2", input=safe)
    assert watch.samples > 5
    assert watch.containing(leaked)
    assert watch.containing(safe) == []
