"""Where provisioning reaches a Lima guest: the SSH endpoint Lima published for it.

Lima publishes the endpoint (its ``ssh.config``) once the instance runs, so there is
nothing to wait for. For a remote Lima host the guest is reached through that host as
a jump, with a local copy (0600) of the identity Lima keeps there.
"""

from __future__ import annotations

import hashlib

from sand.backends.lima import scripts, vmops
from sand.backends.lima.context import Ctx
from sand.backends.lima.sshconfig import parse_ssh_config
from sand.desired import DesiredVM
from sand.errors import BackendError
from sand.guest.endpoint import BOOT_MARK, GuestEndpoint
from sand.observed import ObservedVM
from sand.state.paths import project_dir
from sand.state.private import write_private_file


async def endpoint(
    ctx: Ctx, vm: DesiredVM | None, current: ObservedVM, *, wait: float | None = None
) -> GuestEndpoint:
    d = current.details
    if current.power != "running":
        raise BackendError(
            f"{current.name} is {current.power}; it must be running to be reached",
            backend=ctx.name,
        )
    parsed = None
    if d.get("ssh_config"):
        res = await ctx.runner.run(scripts.read_file_argv(d["ssh_config"]), timeout=30)
        if res.ok:
            parsed = parse_ssh_config(res.stdout.decode(errors="replace"), f"lima-{current.name}")
    host = (parsed.hostname if parsed else None) or d.get("ssh_address") or "127.0.0.1"
    port = (parsed.port if parsed else None) or int(d.get("ssh_port") or 0)
    user = (parsed.user if parsed else None) or d.get("user") or (vm.user if vm else "")
    identity = (parsed.identity if parsed else None) or d.get("identity_file") or ""
    if not port or not identity:
        raise BackendError(
            f"Lima has not published an SSH endpoint for {current.name} yet "
            f"(port {port or '?'}, identity {identity or '?'})",
            backend=ctx.name,
        )
    if ctx.runner.remote:
        identity = await local_key(ctx, identity)
    incarnation = pin_family(current)
    boot = d.get("boot") or ""
    # The pin follows the guest's boot: every start makes new host keys (see
    # docs/security.md), so a new start is met as a new machine and trusted on first
    # contact, while a key that changes within one start is still refused.
    alias = incarnation + (f"{BOOT_MARK}{boot}" if boot else "")
    return GuestEndpoint(
        host=host,
        port=port,
        user=user,
        identity=identity,
        host_key_policy="pin",
        host_key_alias=alias,
        host_key_family=incarnation,
        jump=ctx.jump,
    )


def pin_family(current: ObservedVM) -> str:
    """The name the guest's host-key pins go by across its boots: the instance and its
    incarnation (the sidecar's uid), so another VM of that name is another machine."""
    uid = current.details.get("uid") or ""
    return f"lima-{current.name}" + (f".{uid}" if uid else "")


async def local_key(ctx: Ctx, remote_path: str) -> str:
    """A local copy (0600) of the remote Lima identity, for the jump-host hop."""
    if remote_path in ctx.local_keys:
        return ctx.local_keys[remote_path]
    res = await ctx.runner.run(scripts.read_file_argv(remote_path), timeout=30)
    if not res.ok:
        raise vmops.error(ctx, res, f"read the Lima identity {remote_path}")
    key_dir = ctx.key_dir
    if key_dir is None:
        key_dir = project_dir(ctx.project) / "lima-keys"
    tag = hashlib.sha256(f"{ctx.runner.where}\0{remote_path}".encode()).hexdigest()[:12]
    path = key_dir / f"{ctx.name}-{tag}"
    write_private_file(path, res.stdout)  # in a 0700 dir, 0600 whatever the umask
    ctx.local_keys[remote_path] = str(path)
    return str(path)
