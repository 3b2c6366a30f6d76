"""A VM's egress, enforced by the PVE firewall (docs/egress.md#proxmox).

pve-firewall filters the VM's traffic at its tap device on the host, where root in the
guest does not reach. For a deny policy sand writes, before the VM's first start:

- the VM's firewall options, one request: ``enable=1``, ``policy_out=DROP`` (each
  dropped packet logged: the denial log), ``policy_in=ACCEPT`` (what reached the VM
  before a policy, sand's SSH first, still does), ``dhcp=1`` (the VM takes its
  address by DHCP, which ``policy_out=DROP`` would otherwise drop);
- an ipset ``sand-egress`` of the allowed CIDRs (one request, then one per CIDR: PVE
  takes one entry per request);
- one ``out`` rule ``ACCEPT`` to ``+sand-egress`` on the declared TCP ports (``dport``
  takes a comma list), sent with ``enable=1``: ``create_rule`` stores a rule sent
  without it disabled;
- ``firewall=1`` on ``net0``, in the config write the create already sends.

A changed policy removes sand's own rule and ipset (the operator's are kept) and writes
the new ones; an ``allow`` policy turns the VM's firewall off (``enable=0``).
"""

from __future__ import annotations

from typing import Any

from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.manifest.egress import DENY, EgressPolicy

IPSET = "sand-egress"
# Marks the rules sand wrote, so a rewrite removes its own and keeps an operator's.
RULE_COMMENT = "sand egress"
# The description block's key holding the policy enforced (``DesiredVM.infra()``'s).
MARKER_KEY = "egress"


def denies(policy: EgressPolicy | None) -> bool:
    return policy is not None and policy.policy == DENY


def with_firewall(net: object) -> str:
    """A netN value with ``firewall=1`` (pve-firewall filters only a NIC that has it)."""
    parts = [p for p in str(net or "").split(",") if p and not p.startswith("firewall=")]
    return ",".join([*parts, "firewall=1"])


def nic_filtered(net: object) -> bool:
    return "firewall=1" in str(net or "").split(",")


async def write(
    ctx: Ctx, node: str, vmid: str | int, policy: EgressPolicy | None, *, fresh: bool
) -> None:
    """The VM's firewall as ``policy`` says; ``fresh``: a clone sand just made, which
    holds none of sand's rules yet (nothing to read or remove first)."""
    fw = f"nodes/{node}/qemu/{vmid}/firewall"
    if not fresh:
        await _remove_own(ctx, fw)
    if not denies(policy):
        await ctx.client.put(f"{fw}/options", enable=0)
        return
    assert policy is not None
    await ctx.client.put(
        f"{fw}/options",
        enable=1,
        policy_out="DROP",
        policy_in="ACCEPT",
        dhcp=1,
        log_level_out="info",
    )
    if not policy.cidrs:
        return  # only domains, refused on PVE: nothing is allowed out
    await ctx.client.post(f"{fw}/ipset", name=IPSET, comment=RULE_COMMENT)
    for cidr in policy.cidrs:
        await ctx.client.post(f"{fw}/ipset/{IPSET}", cidr=cidr)
    await ctx.client.post(
        f"{fw}/rules",
        type="out",
        action="ACCEPT",
        dest=f"+{IPSET}",
        proto="tcp",
        dport=",".join(str(p) for p in policy.ports),
        enable=1,
        pos=0,
        comment=RULE_COMMENT,
    )


async def _remove_own(ctx: Ctx, fw: str) -> None:
    """sand's rules (highest position first: each removal shifts those below) and its
    ipset; an operator's stay."""
    rules: list[dict[str, Any]] = list(await ctx.client.get(f"{fw}/rules") or [])
    for rule in sorted(rules, key=lambda r: int(r.get("pos", 0)), reverse=True):
        if rule.get("comment") == RULE_COMMENT:
            await ctx.client.delete(f"{fw}/rules/{int(rule['pos'])}")
    ipsets = await ctx.client.get(f"{fw}/ipset") or []
    if any(s.get("name") == IPSET for s in ipsets):
        await ctx.client.delete(f"{fw}/ipset/{IPSET}", force=1)


def grant_fix(ctx: Ctx) -> str:
    """The one read-only grant that shows whether the datacenter's firewall is on: a
    role with Sys.Audit alone, on ``/`` alone (``--propagate 0``)."""
    who = ctx.client.token.token_id
    return (
        "pveum role add SandAudit --privs Sys.Audit && "
        f"pveum acl modify / --roles SandAudit --tokens '{who}' --propagate 0"
    )


async def datacenter_gap(ctx: Ctx) -> str | None:
    """Why no VM firewall is applied now (pve-firewall applies none while the
    datacenter's firewall is off, ``PVE::Firewall::update``), or None: it is on. One
    read of ``/cluster/firewall/options``, which takes Sys.Audit on ``/``."""
    try:
        options = await ctx.client.get("cluster/firewall/options") or {}
    except ProxmoxError as e:
        if e.kind is not ErrorKind.FORBIDDEN:
            raise
        return (
            "the token cannot read whether the datacenter's firewall is on (Sys.Audit on /, "
            f"read-only, not propagated); fix: {grant_fix(ctx)}"
        )
    if not options.get("enable"):
        return (
            "the datacenter's firewall is off, so PVE applies no VM's firewall; fix: "
            "pvesh set /cluster/firewall/options --enable 1 (Datacenter > Firewall > Options)"
        )
    return None
