"""Three claims of the security model, each checked where it holds: in a real guest, in
the instance's configuration Lima reads, in fakepve's state and on the host's sockets.

* Claude Code sessions see the scoped secrets of the directory they work in through
  the provisioned direnv hooks: the SessionStart hook of the provisioned
  ``~/.claude/settings.json``, run as Claude Code runs it, writes the secret into
  Claude's env file in the project directory and not outside it; an interactive login
  shell (the ``~/.bashrc`` hook) likewise.
* Samba is off on Lima: no host directory is shared (the instance's ``lima.yaml`` mounts
  at most the read-only bundle), and the provisioned guest runs, holds and listens for
  no file server.
* A Proxmox VM's ports are not forwarded: a guest listener is reached on the guest's
  own address and on nothing of the host's; nothing asked PVE for a forward or a
  firewall rule; ``ports:`` on a Proxmox VM is refused, located, before any request.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.helpers import Sand
from tests.e2e.test_apply_proxmox_guests import AgentAnswers
from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import as_user, lima_manifest, stand_in_agents

pytestmark = pytest.mark.e2e

SECRET = "direnv-canary-7a21-secret-value"
LIMA = lima_manifest(
    "claims",
    [{"name": "dev-1", "agents": ["claude"], "secrets": [{"name": "NPM_TOKEN", "scope": "~/src"}]}],
)
FILE_SERVER_PORTS = (139, 445, 2049)


def _sand(root: Path, env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "sand", *args], env=env, capture_output=True, text=True,
        timeout=300, cwd=root, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture
def lima_guest(tmp_path: Path, netns_guest):
    guest = netns_guest()
    standin = StandIn.create(tmp_path, lima_home=tmp_path / "lima")
    standin.back_with_guest("dev-1", guest)
    (tmp_path / "sand.yaml").write_text(LIMA)
    env = {
        **os.environ,
        **standin.env(),
        "SAND_STATE_DIR": str(tmp_path / "state"),
        "SAND_TEST_NPM": SECRET,
        "SAND_AGENT_SOURCE": str(stand_in_agents(tmp_path / "agents")),
        "NO_COLOR": "1",
    }
    env.pop("LIMA_HOME")
    _sand(tmp_path, env, "apply", "--auto-approve")
    return guest, standin


def _claude_env_file(guest, directory: str) -> str:
    """What Claude Code's own SessionStart direnv hook leaves in its env file when the
    session works in ``directory``: the hook is read from the provisioned settings and
    run as Claude Code runs a hook (through a shell, ``CLAUDE_ENV_FILE`` set), then the
    file is sourced as Claude Code sources it before each of its Bash commands."""
    home = f"/home/{guest.user}"
    settings = json.loads(
        guest.run_root(["cat", f"{home}/.claude/settings.json"], check=True).stdout
    )
    (hook,) = [
        h["command"]
        for group in settings["hooks"]["SessionStart"]
        for h in group["hooks"]
        if "direnv" in h["command"]
    ]
    env_file = f"/tmp/claude-env-{abs(hash(directory))}"
    session = (
        f"cd {directory} && CLAUDE_ENV_FILE={env_file} sh -c {shlex.quote(hook)} && "
        f"cd / && env -u NPM_TOKEN bash -c '. {env_file}; printenv NPM_TOKEN'"
    )
    result = as_user(guest, session)
    return result.stdout.decode().strip()


def _interactive(guest, directory: str) -> str:
    """``printenv`` typed at the prompt of an interactive login shell in ``directory``:
    the ``~/.bashrc`` hook has run direnv before the prompt."""
    typed = "printenv NPM_TOKEN; exit\n"
    line = f"cd {directory} && printf %s {shlex.quote(typed)} | bash -i 2>/dev/null"
    return as_user(guest, line).stdout.decode().strip()


def test_claude_sessions_see_scoped_secrets_through_the_provisioned_direnv_hook(
    lima_guest,
) -> None:
    guest, _ = lima_guest
    assert _claude_env_file(guest, "~/src") == SECRET
    assert _claude_env_file(guest, "~") == ""
    assert _claude_env_file(guest, "/tmp") == ""
    assert _interactive(guest, "~/src") == SECRET
    assert _interactive(guest, "~") == ""


def test_samba_is_off_on_a_lima_guest(lima_guest) -> None:
    guest, standin = lima_guest
    config = standin.read_yaml("dev-1")
    for mount in config.get("mounts") or []:
        assert mount.get("writable") is False, mount  # only the read-only bundle
        assert Path(mount["location"]).expanduser() != Path.home(), mount
    processes = guest.run_root(["ps", "-eo", "comm="], check=True).stdout.decode().split()
    assert not {"smbd", "nmbd", "samba", "nfsd", "rpc.mountd"} & set(processes), processes
    listening = guest.run_root(["ss", "-ltnH"], check=True).stdout.decode()
    ports = {int(line.split()[3].rsplit(":", 1)[1]) for line in listening.splitlines()}
    assert not ports & set(FILE_SERVER_PORTS), listening
    found = guest.run_root(
        ["sh", "-c", "ls -d /etc/samba /etc/exports /usr/sbin/smbd /usr/sbin/exportfs 2>&1"]
    ).stdout.decode()
    assert found.count("No such file or directory") == 4, found


def _reachable(address: str, port: int) -> bool:
    try:
        socket.create_connection((address, port), timeout=2).close()
    except OSError:
        return False
    return True


def _host_addresses() -> list[str]:
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    return [line.split()[3].split("/")[0] for line in out.splitlines()]


def test_a_proxmox_vms_ports_are_not_forwarded(tmp_path: Path, fakepve_server, netns_guest):
    rig = fakepve_server
    guest = netns_guest()
    sand = Sand(tmp_path)
    manifest = rig.manifest([{"name": "pve-1"}], derive_bases=False)
    with_ports = json.loads(json.dumps(manifest))
    with_ports["vms"][0]["ports"] = [{"guest": 8000, "host": 18000}]
    sand.write(with_ports)
    rig.clear_log()
    refused = sand.run("apply", "--auto-approve")
    assert refused.returncode == 1 and "ports are forwarded only on Lima" in refused.stderr
    assert "sand.yaml:" in refused.stderr and "Traceback" not in refused.stderr
    assert rig.requests("POST") == [] and rig.requests("PUT") == [] and rig.vms() == []

    sand.write(manifest)
    with AgentAnswers(rig, {"pve-1": guest}):
        proc = sand.run("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (vm,) = rig.vms()
    # Nothing in PVE forwards a port: no qemu args (hostfwd), no firewall rule asked for.
    assert "args" not in vm.config and "hostfwd" not in json.dumps(vm.config)
    assert [r.path for r in rig.requests(contains="/firewall")] == []

    port = 18000 + os.getpid() % 1000
    guest.run_root(
        ["sh", "-c", f"setsid -f python3 -m http.server {port} --bind 0.0.0.0 "
                     ">/dev/null 2>&1 </dev/null"],
        check=True,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while not _reachable(guest.address, port):  # on the bridge, at the guest's own address
        assert time.monotonic() < deadline, "the guest's listener never came up"
        time.sleep(0.05)
    for address in ("127.0.0.1", *(a for a in _host_addresses() if a != guest.address)):
        assert not _reachable(address, port), address  # nothing of the host's forwards it
