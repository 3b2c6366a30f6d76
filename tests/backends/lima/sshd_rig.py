"""A real sshd on 127.0.0.1 (random port, fresh host and client keys) whose user has the
limactl stand-in on PATH: the remote Lima host for tests. Root runs it with its own config;
nothing of the system's sshd setup is used or changed (except creating /run/sshd)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sand.backends.lima import LimaBackend, make_lima_backend
from sand.manifest.backends import LimaConfig, SshTarget
from tests.limactl_standin import StandIn
from tests.limactl_standin.standin import ALLOW_ROOT_ENV
from tests.required import require

SSHD = "/usr/sbin/sshd"

SSHD_AVAILABLE = bool(os.path.exists(SSHD) and shutil.which("ssh-keygen") and os.geteuid() == 0)


def keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)],
        check=True,
    )
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Sshd:
    dir: Path
    port: int
    host_key: Path
    client_key: Path
    other_key: Path
    known_hosts: Path
    log: Path
    standin: StandIn
    proc: subprocess.Popen[bytes]

    def log_lines(self, needle: str) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if needle in line]

    def connections(self) -> int:
        return len(self.log_lines("Accepted publickey for"))

    def sessions(self) -> int:
        return len(self.log_lines("Starting session:"))

    def local_backend(self) -> LimaBackend:
        """The same LIMA_HOME driven locally: cheap setup for tests about the SSH side."""
        config = LimaConfig(
            type="lima", lima_home=str(self.standin.lima_home), limactl=str(self.standin.executable)
        )
        b = make_lima_backend("remote", config, project="demo", manifest_dir=self.dir)
        assert isinstance(b, LimaBackend)
        return b

    def backend(self, **ssh: object) -> LimaBackend:
        target = {
            "host": "127.0.0.1",
            "port": self.port,
            "user": "root",
            "identity": str(self.client_key),
            "known_hosts": str(self.known_hosts),
            "lima_home": str(self.standin.lima_home),
            **ssh,
        }
        config = LimaConfig(type="lima", ssh=SshTarget(**target))  # type: ignore[arg-type]
        b = make_lima_backend("remote", config, project="demo", manifest_dir=self.dir)
        assert isinstance(b, LimaBackend)
        return b


@pytest.fixture
def sshd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sshd]:
    # The remote-Lima rig: skipped without root and sshd, except in CI, where it fails.
    require(SSHD_AVAILABLE, "the remote Lima rig needs root, /usr/sbin/sshd and ssh-keygen")
    d = tmp_path / "sshd"
    d.mkdir()
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    host_key = keygen(d / "host_ed25519")
    client_key = keygen(d / "client_ed25519")
    other_key = keygen(d / "other_ed25519")
    (d / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    # A LIMA_HOME whose path needs quoting: a space and a '$' must arrive verbatim.
    standin = StandIn.create(tmp_path / "remote", lima_home=tmp_path / "remote" / "lima $HOME x")
    standin.configure(require_tty_false=True, host_user="claude")
    port = _free_port()
    config = d / "sshd_config"
    config.write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nPidFile {d}/sshd.pid\n"
        f"AuthorizedKeysFile {d}/authorized_keys\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
        "StrictModes no\nLogLevel VERBOSE\nAcceptEnv LANG\n"
        # The remote "Lima host" runs as root, as the suite does: the stand-in is told.
        f"SetEnv PATH={standin.bin_dir}:/usr/local/bin:/usr/bin:/bin"
        f" {ALLOW_ROOT_ENV}=1\n"
    )
    log = d / "sshd.log"
    # A session of its own: a hangup meant for the test run's process group (a terminal
    # closing, a job control shell) must not make sshd re-exec in the middle of a test.
    proc = subprocess.Popen([SSHD, "-D", "-f", str(config), "-E", str(log)], start_new_session=True)
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                text = log.read_text() if log.exists() else ""
                raise RuntimeError(f"sshd did not start: {text}") from None
            time.sleep(0.05)
    known_hosts = d / "known_hosts"
    pub = Path(f"{host_key}.pub").read_text().split()
    known_hosts.write_text(f"[127.0.0.1]:{port} {pub[0]} {pub[1]}\n")
    # The test process must not lend the remote backend any agent or default identity.
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    try:
        yield Sshd(d, port, host_key, client_key, other_key, known_hosts, log, standin, proc)
    finally:
        proc.terminate()
        proc.wait(10)
