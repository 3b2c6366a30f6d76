"""Pool.Audit: the privilege that lets the token see which pool a VM is in.

sand tells its VMs from the ``pool`` field of ``GET /cluster/resources`` (a VM of this
project outside the backend's pool is never changed). PVE fills that field only for a
token holding ``Pool.Audit`` on the pool (pve-manager ``PVE::API2::Cluster``, the
``resources`` method, since PVE 7.0): without it, every VM sand made reads as "in no
pool", so the first apply would create a VM and every later plan would refuse to touch
it. So a token without it is refused before any write, with the fix:

* preflight (any change) finds it in the ``GET /access/permissions`` it reads anyway;
* observation (also a plan with no change) sees a VM carrying this project's marker in
  no pool, and then reads the token's permissions on the pool once to tell "the token
  cannot see pools" from "an operator moved the VM out".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sand.backends.proxmox import marker as mk
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.backends.proxmox.refusals import Permissions, holds, pool_audit_problem

PRIVILEGE = "Pool.Audit"


def pool_path(pool: str) -> str:
    return f"/pool/{pool}"


def lacks(perms: Permissions, pool: str) -> bool:
    return not holds(perms, pool_path(pool), PRIVILEGE)


def _ours_in_no_pool(ctx: Ctx, rows: Sequence[Mapping[str, Any]]) -> bool:
    project = ctx.project.lower()
    for row in rows:
        if "pool" in row:
            continue
        tags = mk.parse_tags(row.get("tags"))
        if tags.project is not None and tags.project.lower() == project:
            return True
    return False


async def assert_pools_visible(ctx: Ctx, rows: Sequence[Mapping[str, Any]]) -> None:
    """Raise the fix when a VM of this project shows in no pool because the token lacks
    Pool.Audit (one read of its permissions, only then; once per backend)."""
    if ctx.pool_audit_seen or not _ours_in_no_pool(ctx, rows):
        return
    try:
        where = {"path": pool_path(ctx.config.pool)}
        perms = await ctx.client.request("GET", "access/permissions", where)
    except ProxmoxError:
        return  # not readable: the listing's verdict stands
    if lacks(perms or {}, ctx.config.pool):
        raise ProxmoxError(ctx.name, pool_audit_problem(ctx.config.pool), kind=ErrorKind.FORBIDDEN)
    ctx.pool_audit_seen = True
