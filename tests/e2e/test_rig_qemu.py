"""The rig's full VM: qemu TCG, own kernel, systemd, SSH on loopback."""

from __future__ import annotations

import secrets
import shlex

import asyncssh
import pytest

from tests.rig.gitserver import GitServer
from tests.rig.qemu import GUESTFWD_ADDRESS, QemuGuest
from tests.rig.ssh import connect_options

pytestmark = [pytest.mark.e2e, pytest.mark.tcg]


async def test_qemu_guest_boots_and_answers_over_ssh(qemu_guest: QemuGuest) -> None:
    assert qemu_guest.boot_seconds is not None
    print(f"\nqemu TCG guest: boot to SSH banner in {qemu_guest.boot_seconds:.1f}s")
    async with asyncssh.connect(**connect_options(qemu_guest)) as conn:
        uname = await conn.run("uname -a", check=True)
        assert str(uname.stdout).startswith("Linux ")
        assert "x86_64" in str(uname.stdout)
        ident = await conn.run("id -un; sudo -n id -u", check=True)
        assert str(ident.stdout).split() == [qemu_guest.user, "0"]
        pid1 = await conn.run("cat /proc/1/comm", check=True)
        assert str(pid1.stdout).strip() == "systemd"
        fs = await conn.run('stat -f -c %T /dev/shm "/run/user/$(id -u)"', check=True)
        assert str(fs.stdout).split() == ["tmpfs", "tmpfs"]
        tools = await conn.run("direnv version && git --version", check=True)
        assert "git version" in str(tools.stdout)
    # How long the boot took is a speed, not a behaviour: bench/time_to_ready_boot.py
    # measures it (a limit here failed a loaded machine's run at 138 s).


def test_qemu_run_root_and_pinned_host_key(qemu_guest: QemuGuest) -> None:
    assert qemu_guest.run_root(["id", "-u"], check=True).stdout.strip() == b"0"
    assert qemu_guest.read_file("/etc/hostname").decode().strip() == qemu_guest.hostname
    argvs = [p.argv for p in qemu_guest.guest_pids()]
    # sshd rewrites its argv[0] ("sshd: /usr/sbin/sshd -D [listener] ...").
    assert any(a and a[0].startswith("sshd:") for a in argvs)
    # sshd only listens behind the loopback forward; the rig's keys are the
    # only way in.
    ssh_cmd = qemu_guest.ssh_argv()
    assert "127.0.0.1" in ssh_cmd[-1]


async def test_qemu_refuses_unpinned_host_key(qemu_guest: QemuGuest) -> None:
    other = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    with pytest.raises(asyncssh.HostKeyNotVerifiable):
        async with asyncssh.connect(**connect_options(qemu_guest, host_public_key=other)):
            pass


async def test_qemu_guest_clones_from_the_git_server_via_guestfwd() -> None:
    # restrict=on means the VM reaches nothing but explicit forwards; this
    # proves a forward to a token-protected GitServer carries real git.
    with GitServer(token=f"rig-{secrets.token_urlsafe(16)}", host="127.0.0.1") as server:
        server.create_repo("vmrepo", {"hello.txt": "from the host\n"})
        with QemuGuest(guestfwds=[(80, "127.0.0.1", server.port)]) as vm:
            url = f"http://{GUESTFWD_ADDRESS}/vmrepo.git"
            async with asyncssh.connect(**connect_options(vm)) as conn:
                await conn.run("umask 077; cat > /dev/shm/tok", input=server.token, check=True)
                helper = (
                    "!f() { echo username=x; printf 'password=%s\\n' \"$(cat /dev/shm/tok)\"; }; f"
                )
                res = await conn.run(
                    f"GIT_TERMINAL_PROMPT=0 git -c credential.helper={shlex.quote(helper)} "
                    f"clone -q {url} ~/vmrepo && cat ~/vmrepo/hello.txt",
                )
                assert res.exit_status == 0, res.stderr
                assert str(res.stdout) == "from the host\n"
                anon = await conn.run(f"GIT_TERMINAL_PROMPT=0 git clone -q {url} ~/anon")
                assert anon.exit_status != 0
        assert any(ok for _p, ok in server.request_log)
