"""`sand doctor` for Lima backends, as a person runs it: one line per cause, naming the
backend, exit 1; `NAME: ok` and exit 0 only when nothing is wrong.

Local: the limactl stand-in (missing, not executable, too old, its --version failing or
unreadable) and a LIMA_HOME that is a file, a read-only mount, or missing where it cannot
be created. Remote: a real sshd on 127.0.0.1 (closed port, hung sshd, changed or unknown
host key, no known_hosts file, no limactl on the remote PATH, an old or failing limactl,
a LIMA_HOME there that is a file or cannot be created)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.backends.lima.sshd_rig import Sshd, sshd  # noqa: F401 - fixture
from tests.limactl_standin import StandIn
from tests.required import require


def manifest(path: Path, backend: dict[str, Any]) -> Path:
    data = {
        "apiVersion": "sand/v1",
        "project": "doctorlima",
        "backends": {"laptop": backend},
        "defaults": {"image": "debian-12", "provision": False},
        "vms": [{"name": "a"}],
    }
    path.write_text(yaml.safe_dump(data))
    return path


def doctor(
    path: Path, *, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "SAND_STATE_DIR": str(path.parent / "state"), **(env or {})}
    return subprocess.run(
        [*prefix, sys.executable, "-m", "sand", "doctor", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=path.parent,
        env=full,
        check=False,
    )


def only_line(res: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout + res.stderr
    return lines[0]


def books(s: StandIn) -> dict[str, str]:
    """The stand-in keeps its config and log outside LIMA_HOME, which these tests break."""
    return {"LIMACTL_STANDIN_CONFIG": str(s.config_path), "LIMACTL_STANDIN_LOG": str(s.log_path)}


@pytest.fixture
def standin(tmp_path: Path) -> StandIn:
    s = StandIn.create(tmp_path / "standin", lima_home=tmp_path / "lima")
    s.configure(require_tty_false=True)
    return s


# --- this machine --------------------------------------------------------------------------


def test_a_working_local_lima_is_ok(tmp_path: Path, standin: StandIn) -> None:
    m = manifest(
        tmp_path / "sand.yaml",
        {"type": "lima", "lima_home": "./lima", "limactl": str(standin.executable)},
    )
    res = doctor(m, env=books(standin))
    assert res.returncode == 0, res.stdout + res.stderr
    assert only_line(res) == "laptop: ok"
    assert standin.commands() == [""]  # only `limactl --tty=false --version`: nothing changed


def test_a_missing_lima_home_is_fine(tmp_path: Path, standin: StandIn) -> None:
    m = manifest(
        tmp_path / "sand.yaml",
        {"type": "lima", "lima_home": "./not-yet", "limactl": str(standin.executable)},
    )
    res = doctor(m, env=books(standin))
    assert res.returncode == 0, res.stdout + res.stderr
    assert only_line(res) == "laptop: ok"
    assert not (tmp_path / "not-yet").exists()


def test_limactl_not_on_path(tmp_path: Path) -> None:
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    (bare / "perl").symlink_to(shutil.which("perl") or "/usr/bin/perl")  # only limactl missing
    m = manifest(tmp_path / "sand.yaml", {"type": "lima", "lima_home": "./lima"})
    res = doctor(m, env={"PATH": str(bare)})
    assert res.returncode == 1, res.stdout + res.stderr
    assert only_line(res).startswith("laptop: error: 'limactl' not found on PATH on this machine")


def test_no_perl_for_the_lease_on_this_machine(tmp_path: Path, standin: StandIn) -> None:
    # A PATH with limactl (and the python3 its stand-in runs on) but no perl.
    bare = tmp_path / "bin"
    bare.mkdir()
    (bare / "limactl").symlink_to(standin.executable)
    (bare / "python3").symlink_to(sys.executable)
    m = manifest(tmp_path / "sand.yaml", {"type": "lima", "lima_home": "./lima"})
    res = doctor(m, env={**books(standin), "PATH": str(bare)})
    assert res.returncode == 1, res.stdout + res.stderr
    assert only_line(res) == (
        "laptop: error: perl not found on this machine: sand holds the project's one-writer "
        "lease on a Lima host with a small perl process (an flock), so no apply can change "
        "a VM there without it; install perl"
    )


def test_a_configured_limactl_that_does_not_exist(tmp_path: Path) -> None:
    gone = tmp_path / "opt" / "lima" / "bin" / "limactl"
    m = manifest(tmp_path / "sand.yaml", {"type": "lima", "limactl": str(gone)})
    res = doctor(m)
    assert res.returncode == 1
    assert only_line(res) == (
        f"laptop: error: limactl {gone} (the backend's `limactl:`) does not exist"
    )


def test_a_configured_limactl_that_is_not_executable(tmp_path: Path, standin: StandIn) -> None:
    plain = tmp_path / "limactl"
    shutil.copy(standin.executable, plain)
    plain.chmod(0o644)
    m = manifest(tmp_path / "sand.yaml", {"type": "lima", "limactl": str(plain)})
    res = doctor(m, env=books(standin))
    assert res.returncode == 1
    assert only_line(res) == (
        f"laptop: error: limactl {plain} (the backend's `limactl:`) is not an executable file"
    )


def test_limactl_older_than_2_2_warns_why(tmp_path: Path, standin: StandIn) -> None:
    standin.configure(version="2.1.1")
    m = manifest(
        tmp_path / "sand.yaml",
        {"type": "lima", "lima_home": "./lima", "limactl": str(standin.executable)},
    )
    res = doctor(m, env=books(standin))
    assert res.returncode == 1, res.stdout + res.stderr
    line = only_line(res)
    assert line.startswith("laptop: warning: limactl 2.1.1 on this machine is older than 2.2.0")
    assert "being cloned or deleted" in line and "lima-vm/lima#5236" in line


def test_a_limactl_whose_version_fails(tmp_path: Path, standin: StandIn) -> None:
    standin.fail("version", "cannot read the embedded version")
    m = manifest(
        tmp_path / "sand.yaml",
        {"type": "lima", "lima_home": "./lima", "limactl": str(standin.executable)},
    )
    res = doctor(m, env=books(standin))
    assert res.returncode == 1, res.stdout + res.stderr
    line = only_line(res)
    assert line.startswith(
        f"laptop: error: `{standin.executable} --version` failed on this machine (exit 1): "
    )
    assert "cannot read the embedded version" in line


def test_a_limactl_version_that_cannot_be_read(tmp_path: Path, standin: StandIn) -> None:
    standin.configure(version="HEAD-unknown")
    m = manifest(
        tmp_path / "sand.yaml",
        {"type": "lima", "lima_home": "./lima", "limactl": str(standin.executable)},
    )
    res = doctor(m, env=books(standin))
    assert res.returncode == 1, res.stdout + res.stderr
    assert only_line(res) == (
        "laptop: warning: cannot read limactl's version on this machine from "
        "'limactl version HEAD-unknown'"
    )


def test_a_missing_lima_home_that_cannot_be_created(tmp_path: Path, standin: StandIn) -> None:
    (tmp_path / "a-file").write_text("")
    m = manifest(
        tmp_path / "sand.yaml",
        {"type": "lima", "lima_home": "./a-file/lima", "limactl": str(standin.executable)},
    )
    res = doctor(m, env=books(standin))
    assert res.returncode == 1, res.stdout + res.stderr
    assert only_line(res) == (
        f"laptop: error: LIMA_HOME {tmp_path / 'a-file' / 'lima'} does not exist and cannot "
        f"be created: {tmp_path / 'a-file'} is not a directory"
    )


def test_a_lima_home_that_is_a_file(tmp_path: Path, standin: StandIn) -> None:
    (tmp_path / "lima-file").write_text("not a directory\n")
    m = manifest(
        tmp_path / "sand.yaml",
        {"type": "lima", "lima_home": "./lima-file", "limactl": str(standin.executable)},
    )
    res = doctor(m, env=books(standin))
    assert res.returncode == 1
    assert only_line(res) == f"laptop: error: LIMA_HOME {tmp_path / 'lima-file'} is not a directory"


def _can_mount_read_only(probe: Path) -> bool:
    if not shutil.which("unshare") or os.geteuid() != 0:
        return False
    res = subprocess.run(
        [
            "unshare",
            "-m",
            "sh",
            "-c",
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0"',
            str(probe),
        ],
        capture_output=True,
        check=False,
    )
    return res.returncode == 0


def test_a_read_only_lima_home(tmp_path: Path, standin: StandIn) -> None:
    home = tmp_path / "ro-home"
    home.mkdir()
    require(_can_mount_read_only(home), "needs root and unshare to make a read-only mount")
    m = manifest(
        tmp_path / "sand.yaml",
        {"type": "lima", "lima_home": str(home), "limactl": str(standin.executable)},
    )
    # A private mount namespace: LIMA_HOME is a read-only bind mount of itself, which even
    # root cannot write (permission bits would not stop root).
    wrap = (
        "unshare",
        "-m",
        "sh",
        "-c",
        'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
        str(home),
    )
    res = doctor(m, env=books(standin), prefix=wrap)
    assert res.returncode == 1, res.stdout + res.stderr
    assert only_line(res).startswith(f"laptop: error: LIMA_HOME {home} is not writable")
    probe = home / "still-writable-outside"
    probe.write_text("")  # the mount was private to that one command
    assert probe.exists()


# --- a remote host -------------------------------------------------------------------------


def remote_manifest(s: Sshd, path: Path, **ssh: Any) -> Path:
    target = {
        "host": "127.0.0.1",
        "port": s.port,
        "user": "root",
        "identity": str(s.client_key),
        "known_hosts": str(s.known_hosts),
        "lima_home": str(s.standin.lima_home),
        **ssh,
    }
    backend = {"type": "lima", "ssh": target}
    if "limactl" in ssh:
        backend["limactl"] = target.pop("limactl")
    return manifest(path, backend)


def test_a_working_remote_lima_is_ok(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert only_line(res) == "laptop: ok"


def test_a_remote_host_on_a_closed_port(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml", port=port))
    assert res.returncode == 1
    line = only_line(res)
    assert line.startswith(
        f"laptop: error: cannot connect to the remote Lima host root@127.0.0.1:{port}"
    )


def test_a_changed_remote_host_key(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    other = Path(f"{sshd.other_key}.pub").read_text().split()
    sshd.known_hosts.write_text(f"[127.0.0.1]:{sshd.port} {other[0]} {other[1]}\n")
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml"))
    assert res.returncode == 1
    line = only_line(res)
    assert line.startswith("laptop: error: the host key of the remote Lima host 127.0.0.1:")
    assert "does not match the key pinned in" in line and str(sshd.known_hosts) in line
    assert sshd.sessions() == 0  # refused before any command ran


def test_an_unpinned_remote_host_key(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    sshd.known_hosts.write_text("")
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml"))
    assert res.returncode == 1
    assert f"is not in {sshd.known_hosts}: its host key is not pinned" in only_line(res)


def test_a_refused_remote_login(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml", identity=str(sshd.other_key)))
    assert res.returncode == 1
    line = only_line(res)
    assert line.startswith("laptop: error: SSH to the remote Lima host root@127.0.0.1:")
    assert "was refused" in line


def test_no_limactl_on_the_remote_host(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml", limactl="no-such-limactl"))
    assert res.returncode == 1, res.stdout + res.stderr
    assert only_line(res).startswith(
        f"laptop: error: 'no-such-limactl' not found on root@127.0.0.1:{sshd.port}"
    )


def test_a_perl_without_fcntl_on_the_remote_host(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    # First on the remote PATH: a perl that cannot load Fcntl, as a broken install says.
    perl = sshd.standin.bin_dir / "perl"
    perl.write_text('#!/bin/sh\necho "Can\'t locate Fcntl.pm in @INC" >&2\nexit 2\n')
    perl.chmod(0o755)
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml"))
    assert res.returncode == 1, res.stdout + res.stderr
    line = only_line(res)
    assert line.startswith(f"laptop: error: perl on root@127.0.0.1:{sshd.port} cannot load Fcntl")
    assert line.endswith("no apply can change a VM there without it; repair perl")


def test_an_old_limactl_on_the_remote_host(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    sshd.standin.configure(version="2.0.3")
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml"))
    assert res.returncode == 1
    line = only_line(res)
    assert f"laptop: warning: limactl 2.0.3 on root@127.0.0.1:{sshd.port} is older than 2.2.0" in (
        line
    )
    assert "lima-vm/lima#5236" in line


@pytest.mark.sand_time_scale(0.01)  # the 20 s are named, not waited
def test_a_remote_host_that_never_answers(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    # sshd frozen: the kernel still accepts on its port, but no SSH banner ever comes.
    sshd.proc.send_signal(signal.SIGSTOP)
    try:
        start = time.monotonic()
        res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml"))
        took = time.monotonic() - start
    finally:
        sshd.proc.send_signal(signal.SIGCONT)
    assert res.returncode == 1
    assert only_line(res) == (
        f"laptop: error: cannot connect to the remote Lima host root@127.0.0.1:{sshd.port}: "
        "no SSH answer within 20s"
    )
    assert took < 40, took  # the connect timeout, not a hang


def test_a_missing_known_hosts_file(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    gone = tmp_path / "no-such-known_hosts"
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml", known_hosts=str(gone)))
    assert res.returncode == 1
    line = only_line(res)
    assert line.startswith("laptop: error: cannot verify the remote Lima host 127.0.0.1:")
    assert f"the known_hosts file {gone} does not exist" in line
    assert sshd.connections() == 0  # nothing was sent to an unverified host


def remote_books(sshd: Sshd, tmp_path: Path) -> str:  # noqa: F811
    """The remote stand-in with its config and log kept outside a LIMA_HOME these tests
    break: a wrapper on the remote host, named as the backend's ``limactl:``."""
    wrapper = tmp_path / "remote-limactl"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"LIMACTL_STANDIN_CONFIG='{sshd.standin.config_path}' "
        f"LIMACTL_STANDIN_LOG='{sshd.standin.log_path}' exec '{sshd.standin.executable}' \"$@\"\n"
    )
    wrapper.chmod(0o755)
    return str(wrapper)


def test_a_remote_lima_home_that_is_a_file(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "remote-home-file"
    home.write_text("")
    m = remote_manifest(
        sshd, tmp_path / "sand.yaml", lima_home=str(home), limactl=remote_books(sshd, tmp_path)
    )
    res = doctor(m)
    assert res.returncode == 1, res.stdout + res.stderr
    assert only_line(res) == (
        f"laptop: error: LIMA_HOME {home} on root@127.0.0.1:{sshd.port} is not a directory"
    )


def test_a_remote_lima_home_that_cannot_be_created(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    (tmp_path / "a-file").write_text("")
    home = tmp_path / "a-file" / "lima"
    m = remote_manifest(
        sshd, tmp_path / "sand.yaml", lima_home=str(home), limactl=remote_books(sshd, tmp_path)
    )
    res = doctor(m)
    assert res.returncode == 1, res.stdout + res.stderr
    assert only_line(res) == (
        f"laptop: error: LIMA_HOME {home} on root@127.0.0.1:{sshd.port} does not exist and "
        "cannot be created (its nearest existing parent is not a writable directory)"
    )


def test_a_missing_remote_lima_home_is_fine(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    home = tmp_path / "remote" / "not-yet"
    m = remote_manifest(
        sshd, tmp_path / "sand.yaml", lima_home=str(home), limactl=remote_books(sshd, tmp_path)
    )
    res = doctor(m)
    assert res.returncode == 0, res.stdout + res.stderr
    assert only_line(res) == "laptop: ok"
    assert not home.exists()


def test_a_failing_limactl_on_the_remote_host(sshd: Sshd, tmp_path: Path) -> None:  # noqa: F811
    sshd.standin.fail("version", "cannot read the embedded version")
    res = doctor(remote_manifest(sshd, tmp_path / "sand.yaml"))
    assert res.returncode == 1
    line = only_line(res)
    assert line.startswith(
        f"laptop: error: `limactl --version` failed on root@127.0.0.1:{sshd.port} (exit 1): "
    )
    assert "cannot read the embedded version" in line
