"""Values the manifest refuses are refused again where the backends use them.

Configs here are built with ``model_construct`` (no validation), as any entry
point other than the manifest loader could: the backend itself must still
refuse to aim the token at another host or API path, or to run an option as
limactl. Assertions are on the fake PVE's request log: nothing was sent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sand.backends.lima import make_lima_backend
from sand.backends.proxmox.client import PveClient
from sand.backends.proxmox.errors import ProxmoxError
from sand.errors import BackendError, TransportError
from sand.guest.endpoint import JumpHost
from sand.manifest.backends import LimaConfig, SshTarget
from sand.verbs.shell import jump_config
from tests.fakepve_rig.rig import FakePveRig


@pytest.mark.parametrize(
    "path",
    [
        "nodes/pve1/../../access/users",
        "nodes/../access/acl",
        "nodes/pve1%2F..%2F..%2Faccess/qemu",
        "nodes/pve1/qemu/100/config?delete=net0",
        "nodes/pve1/qemu/100/config#x",
        "nodes//qemu",
        "nodes/-x/qemu",
        "nodes/pve 1/qemu",
    ],
)
async def test_an_api_path_that_could_reach_another_endpoint_is_never_sent(
    fakepve_server: FakePveRig, path: str
) -> None:
    backend = fakepve_server.make_backend()
    try:
        client = backend.ctx.client  # type: ignore[attr-defined]
        await client.get("version")  # the client works, and the log shows it
        fakepve_server.clear_log()
        with pytest.raises(ProxmoxError, match="refusing API path"):
            await client.get(path)
        assert fakepve_server.log == []
        await client.get("cluster/resources", type="vm")
        assert len(fakepve_server.log) == 1
    finally:
        await backend.close()


@pytest.mark.parametrize(
    "host", ["root:hunter2@pve.test", "https://pve.test/", "-pve.test", "pve.test/../x"]
)
def test_a_client_for_a_host_with_credentials_or_a_path_is_refused(host: str) -> None:
    with pytest.raises(ProxmoxError, match="refusing host") as info:
        PveClient(backend="pve", host=host, port=8006, token_file=Path("t"))
    assert "hunter2" not in str(info.value)


def _lima(**fields: object) -> LimaConfig:
    base: dict[str, object] = {
        "type": "lima",
        "ssh": None,
        "lima_home": None,
        "limactl": "limactl",
        "clone_parallelism": 2,
    }
    return LimaConfig.model_construct(**{**base, **fields})  # type: ignore[arg-type]


def _ssh(**fields: object) -> SshTarget:
    base: dict[str, object] = {
        "host": "build.lan",
        "user": "me",
        "port": 22,
        "identity": None,
        "lima_home": ".lima",
        "known_hosts": None,
    }
    return SshTarget.model_construct(**{**base, **fields})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("config", "what"),
    [
        (_lima(limactl="--debug"), "limactl"),
        (_lima(limactl="lima\nctl"), "limactl"),
        (_lima(ssh=_ssh(host="-oProxyCommand=touch /tmp/x")), "ssh.host"),
        (_lima(ssh=_ssh(host="me@build.lan")), "ssh.host"),
        (_lima(ssh=_ssh(user="-oProxyCommand=x")), "ssh.user"),
    ],
)
def test_a_lima_backend_refuses_an_option_as_limactl_host_or_user(
    config: LimaConfig, what: str, tmp_path: Path
) -> None:
    with pytest.raises(BackendError, match=f"refusing {what}"):
        make_lima_backend("laptop", config, project="demo", manifest_dir=tmp_path)


def test_a_clean_lima_backend_is_built(tmp_path: Path) -> None:
    make_lima_backend("laptop", _lima(ssh=_ssh()), project="demo", manifest_dir=tmp_path)


@pytest.mark.parametrize(
    "jump",
    [
        JumpHost(host="-oProxyCommand=x", port=22, user="me", identity=None, known_hosts=None),
        JumpHost(host="mac.lan", port=22, user="-oX=y", identity=None, known_hosts=None),
    ],
)
def test_sand_shell_writes_no_option_into_the_jump_hosts_ssh_config(jump: JumpHost) -> None:
    with pytest.raises(TransportError, match="starts with '-'"):
        jump_config(jump)
