"""What a real PVE refuses that sand checks before it writes: version, tags, bridge.

* **The major version** (``GET /version``, which only ``sand doctor`` reads: nothing
  else sand calls differs between 8 and 9, so a plan costs no version read): PVE 9
  split ``VM.Monitor`` into ``VM.GuestAgent.*``; reading the guest agent's network
  answer takes ``VM.Monitor`` on 8 and ``VM.GuestAgent.Audit`` on 9.
* **Tags** (``/cluster/options`` ``user-tag-access``): sand writes new tags (its
  marker's fingerprint) on every VM it changes. Unless ``user-allow`` is ``free``, a
  token without ``Sys.Modify`` on ``/`` may set only tags that exist (``existing``) or
  are listed (``list``), or none (``none``), and PVE answers 403
  (``PVE::GuestHelpers::assert_tag_permissions``). Without ``Sys.Audit`` on ``/`` the
  setting itself is hidden, but ``allowed-tags`` still shows it: a tag the token can
  see on a VM that it may not set means ``list`` or ``none``.
* **The bridge**: ``SDN.Use`` on ``/sdn/zones/localnetwork/<bridge>`` is checked on
  every clone and ``net*`` write (``PVE::QemuServer::check_bridge_access``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sand.backends.protocol import PreflightItem, PreflightProblem
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ProxmoxError

Permissions = Mapping[str, Mapping[str, Any]]


def holds(perms: Permissions, path: str, privilege: str, also: tuple[str, ...] = ()) -> bool:
    """Whether ``privilege`` applies on ``path``: on it, on a propagating parent, or on one
    of ``also`` (the pool the object is a member of)."""
    for candidate in (path, *also):
        parts = candidate.rstrip("/").split("/")
        for i in range(len(parts), 0, -1):
            prefix = "/".join(parts[:i]) or "/"
            granted = perms.get(prefix) or {}
            if privilege in granted and (prefix == candidate or propagates(granted[privilege])):
                return True
    return False


def propagates(flag: Any) -> bool:
    return str(flag).lower() not in ("0", "false", "")


AGENT_AUDIT = {8: "VM.Monitor", 9: "VM.GuestAgent.Audit"}
LATEST = 9
TAG_FIX = "pvesh set /cluster/options --user-tag-access user-allow=free"


def major_of(version: Mapping[str, Any] | None) -> int:
    """8 or 9 from ``GET /version`` (``{"version": "8.4.1", "release": "8.4"}``); a
    version sand does not know is treated as the newest it knows."""
    text = str((version or {}).get("release") or (version or {}).get("version") or "")
    head = text.split(".", 1)[0]
    return int(head) if head.isdigit() and int(head) <= LATEST else LATEST


def agent_privilege(major: int) -> str:
    return AGENT_AUDIT.get(major, AGENT_AUDIT[LATEST])


def bridge_path(bridge: str) -> str:
    return f"/sdn/zones/localnetwork/{bridge}"


def bridge_problem(bridge: str) -> str:
    return (
        f"the token lacks SDN.Use on {bridge_path(bridge)}: PVE refuses every clone and "
        f"network change on bridge {bridge!r}; grant it there (the SandNet role of "
        "docs/backends/proxmox.md)"
    )


POOL_AUDIT_WHY = (
    "without it PVE leaves the pool out of every VM in /cluster/resources, and sand cannot "
    "tell its own VMs from others'; add it to sand's role (pveum role modify SandVM --privs "
    "Pool.Audit --append 1; docs/backends/proxmox.md#the-token)"
)


def pool_audit_problem(pool: str) -> str:
    """Without Pool.Audit PVE leaves ``pool`` out of each VM's row in /cluster/resources
    (pve-manager ``PVE::API2::Cluster`` ``resources``): see pool_audit.py."""
    return f"the token lacks Pool.Audit on /pool/{pool}: {POOL_AUDIT_WHY}"


def _user_allow(options: Mapping[str, Any]) -> str | None:
    access = options.get("user-tag-access")
    if access is None:
        return None
    if isinstance(access, Mapping):
        return str(access.get("user-allow") or "free")
    for part in str(access).split(","):
        key, _, value = part.partition("=")
        if key.strip() == "user-allow":
            return value.strip()
    return "free"


def tag_access(
    options: Mapping[str, Any], seen_tags: Iterable[str], *, sys_audit: bool, sys_modify: bool
) -> tuple[str | None, str | None]:
    """(problem, note) about sand's tag writes, from ``GET /cluster/options``; the note
    says what could not be told apart (``free`` from ``existing``, without Sys.Audit).

    ``seen_tags``: the tags on the VMs the token can see. ``sys_audit``: the token holds
    Sys.Audit on / (so a missing ``user-tag-access`` means the default, ``free``)."""
    if sys_modify:
        return None, None
    allow = _user_allow(options)
    if allow is None and sys_audit:
        allow = "free"
    if allow is None:
        allowed = {str(t) for t in options.get("allowed-tags") or []}
        refused = sorted(t for t in set(seen_tags) if t not in allowed)
        if refused:
            allow = "list' or 'none"  # a visible tag the token may not set
        else:
            return None, (
                "tags: the token may set every tag it sees (user-tag-access is 'free' or "
                "'existing'; only Sys.Audit on / shows which, and 'existing' would refuse "
                f"sand's new tags: {TAG_FIX})"
            )
    if allow == "free":
        return None, None
    return (
        f"/cluster/options user-tag-access is user-allow='{allow}': a token without "
        "Sys.Modify on / cannot add the new tags sand writes on every VM it changes; "
        f"set it to free ({TAG_FIX})"
    ), None


def _tags(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    return {t for r in rows for t in str(r.get("tags") or "").replace(",", ";").split(";") if t}


async def write_refusals(
    ctx: Ctx, items: Sequence[PreflightItem], rows: Sequence[Mapping[str, Any]]
) -> tuple[list[PreflightProblem], list[str]]:
    """Problems (and warnings) of the planned writes PVE would refuse for the token:
    Pool.Audit on the pool and user-tag-access for every VM sand changes, SDN.Use on
    the bridge for clones.
    Two reads (``/access/permissions``, ``/cluster/options``), only when something changes;
    a read the token may not make is a warning, never a block. The permissions read are
    kept on ``ctx.permissions`` for preflight's other checks (None: not read)."""
    ctx.permissions = None
    if not items:
        return [], []

    problems: list[PreflightProblem] = []
    warnings: list[str] = []
    try:
        perms = await ctx.client.get("access/permissions") or {}
    except ProxmoxError as e:
        return [], [f"preflight could not read the token's permissions: {e.detail}"]
    ctx.permissions = perms
    if not holds(perms, f"/pool/{ctx.config.pool}", "Pool.Audit"):
        # Without it no VM of the pool shows its pool: sand could not tell its own VMs
        # after this run (pool_audit.py), so nothing is written.
        why = pool_audit_problem(ctx.config.pool)
        problems += [PreflightProblem(i.vm.name, "token_file", why, on_backend=True) for i in items]
    bridge = ctx.config.bridge
    if not holds(perms, bridge_path(bridge), "SDN.Use"):
        for item in items:
            if item.action in ("create", "replace"):
                problems.append(
                    PreflightProblem(
                        item.vm.name, "bridge", bridge_problem(bridge), on_backend=True
                    )
                )
    try:
        options = await ctx.client.get("cluster/options") or {}
    except ProxmoxError as e:
        return problems, [f"preflight could not read /cluster/options: {e.detail}"]
    root = perms.get("/") or {}
    sys_audit, sys_modify = "Sys.Audit" in root, "Sys.Modify" in root
    seen = _tags(rows)
    problem, _ = tag_access(options, seen, sys_audit=sys_audit, sys_modify=sys_modify)
    if problem and not sys_audit:
        # Without Sys.Audit the verdict is inferred from `allowed-tags`, which lists the
        # tags VMs hold as /cluster/options is read; the listing is older. A tag removed
        # since (a lease released, a VM deleted by another applier) would read as one the
        # token may not set: only tags seen before and after the options count.
        fresh = await ctx.client.get("cluster/resources", type="vm") or []
        problem, _ = tag_access(
            options, seen & _tags(fresh), sys_audit=False, sys_modify=sys_modify
        )
    if problem:
        problems += [
            PreflightProblem(item.vm.name, "token_file", problem, on_backend=True) for item in items
        ]
    return problems, warnings
