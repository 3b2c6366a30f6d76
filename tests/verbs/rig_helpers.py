"""What the verbs' real-guest tests share: an endpoint for a rig guest (its host
key pinned the way sand pins), and shell as the guest's user."""

from __future__ import annotations

import shlex
from typing import Any

import asyncssh

from sand.guest.endpoint import GuestEndpoint, JumpHost
from sand.guest.ssh import KnownHosts
from tests.rig.ssh import run as rig_run


def rig_endpoint(guest: Any, *, policy: str = "pin", jump: JumpHost | None = None) -> GuestEndpoint:
    alias = f"rig-{guest.id}"
    if policy == "pin":
        KnownHosts().pin(alias, asyncssh.import_public_key(guest.host_public_key))
    return GuestEndpoint(
        host=guest.address,
        port=guest.port,
        user=guest.user,
        identity=str(guest.client_key_path),
        host_key_policy=policy,
        host_key_alias=alias,
        jump=jump,
    )


GIT_SETUP = (
    "set -e; git config --global user.name Agent; "
    "git config --global user.email agent@example.test; "
    "git config --global init.defaultBranch main; "
)


async def sh(guest: Any, script: str, *, input: str | None = None) -> str:
    """Run ``script`` with bash in the guest as its user; its stdout."""
    res = await rig_run(guest, "bash -c " + shlex.quote(script), input=input, check=False)
    if res.exit_status != 0:
        # Say what the guest said: a bare ProcessError hides why a setup step failed.
        raise AssertionError(
            f"guest script exited {res.exit_status}:\n{script}\n--- stderr ---\n{res.stderr}"
            f"\n--- stdout ---\n{res.stdout}"
        )
    return str(res.stdout)
