"""The QEMU shim: Lima's QEMU command line with net0 restricted and the egress proxy
forwarded, exec'd into the QEMU it chains to; every other QEMU call passed through; a
launch with a way out the proxy does not see refused."""

from __future__ import annotations

import json
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sand.egress.policy import PolicyFile
from sand.egress.shim import PROXY_ADDRESS, PROXY_PORT, NotEnforceable, enforced, rewrite

# As pkg/driver/qemu/qemu.go builds it (Lima 2.2, the default user-mode network).
NET0 = "user,id=net0,net=192.168.5.0/24,dhcpstart=192.168.5.15,hostfwd=tcp:127.0.0.1:60022-:22"
LIMA_ARGV = [
    "-m",
    "4096",
    "-netdev",
    NET0,
    "-device",
    "virtio-net-pci,netdev=net0",
    "-pidfile",
    "/x/qemu.pid",
]


def test_net0_is_restricted_and_forwards_the_proxy_with_the_policy():
    out = rewrite(LIMA_ARGV, "/usr/bin/python3", "/lima/a/sand-egress.json")
    netdev = out[3]
    assert netdev.startswith(NET0 + ",restrict=on,")
    assert netdev.endswith(
        ",guestfwd=tcp:192.168.5.5:80-cmd:/usr/bin/python3 -m sand.egress.relay "
        f"/lima/a/sand-egress.json,guestfwd=tcp:{PROXY_ADDRESS}:{PROXY_PORT}-cmd:"
        "/usr/bin/python3 -m sand.egress.proxy /lima/a/sand-egress.json"
    )
    assert out[:3] + out[4:] == LIMA_ARGV[:3] + LIMA_ARGV[4:]
    assert enforced(out, "/lima/a/sand-egress.json")
    assert not enforced(out, "/lima/b/sand-egress.json")
    assert not enforced(LIMA_ARGV, "/lima/a/sand-egress.json")


@pytest.mark.parametrize("probe", [["-version"], ["-netdev", "help"], ["-machine", "help"]])
def test_calls_that_start_no_vm_pass_through(probe):
    assert rewrite(probe, "py", "/p") == probe


@pytest.mark.parametrize(
    "extra",
    [
        ["-netdev", "socket,id=net1,fd=3"],
        ["-netdev", "user,id=net1,net=10.0.0.0/24"],
        ["-netdev", "stream,id=net1,server=off,addr.type=unix,addr.path=/s"],
    ],
)
def test_a_second_network_device_is_refused(extra):
    with pytest.raises(NotEnforceable):
        rewrite([*LIMA_ARGV, *extra], "py", "/p")
    assert not enforced([*rewrite(LIMA_ARGV, "py", "/p"), *extra], "/p")


def test_a_net0_that_is_not_the_user_mode_network_is_refused():
    with pytest.raises(NotEnforceable):
        rewrite(["-netdev", "socket,id=net0,fd=3"], "py", "/p")


def fake_qemu(tmp_path: Path) -> Path:
    """A QEMU that prints the arguments it was given, as JSON."""
    path = tmp_path / "qemu"
    path.write_text(
        f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n", encoding="utf-8"
    )
    path.chmod(0o755)
    return path


def test_the_shim_execs_the_chained_qemu_with_the_rewritten_line(tmp_path):
    qemu = fake_qemu(tmp_path)
    policy = tmp_path / "a,b" / "sand-egress.json"  # a comma QEMU's parser must not split on
    done = subprocess.run(
        [sys.executable, "-m", "sand.egress.shim", str(policy), f"{qemu} -enable-kvm", *LIMA_ARGV],
        capture_output=True,
        check=True,
    )
    got = json.loads(done.stdout)
    assert got[0] == "-enable-kvm"  # the chained command's own words kept
    assert enforced(got[1:], str(policy))


def test_the_shim_refuses_and_runs_nothing_for_a_second_nic(tmp_path):
    qemu = fake_qemu(tmp_path)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "sand.egress.shim",
            "/p",
            str(qemu),
            *LIMA_ARGV,
            "-netdev",
            "socket,id=net1,fd=3",
        ],
        capture_output=True,
    )
    assert done.returncode == 1 and done.stdout == b""
    assert b"refusing to start a VM with an egress policy" in done.stderr


def test_the_guestfwd_command_runs_the_proxy_as_libslirp_would(tmp_path, monkeypatch):
    """libslirp splits ``cmd:`` like a shell (g_shell_parse_argv) once QEMU has undone
    the doubled commas: what comes out is the proxy on that connection."""
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    policy = tmp_path / "a,b" / "sand-egress.json"
    policy.parent.mkdir()
    policy.write_bytes(
        PolicyFile("p", "b", "a", "s", (), (), (443,), str(tmp_path / "d.jsonl")).to_bytes()
    )
    netdev = rewrite(LIMA_ARGV, sys.executable, str(policy))[3]
    command = netdev.rsplit("-cmd:", 1)[1].replace(",,", ",")
    ours, theirs = socket.socketpair()
    with ours, theirs:
        proc = subprocess.Popen(shlex.split(command), stdin=theirs.fileno(), stdout=theirs.fileno())
        theirs.close()
        ours.sendall(b"CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n")
        ours.shutdown(socket.SHUT_WR)
        assert ours.makefile("rb").readline() == b"HTTP/1.1 403 Forbidden\r\n"
        assert proc.wait(timeout=30) == 0
    assert "10.0.0.1:443" in (tmp_path / "d.jsonl").read_text()
