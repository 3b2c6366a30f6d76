"""A VM's egress read back from the PVE firewall: what a hand changed there is drift.

The marker says which policy sand wrote; it cannot say that someone deleted sand's rule,
added an address to its ipset, set ``policy_out=ACCEPT``, switched the VM's firewall off
or dropped ``firewall=1`` from its NIC since (the PVE GUI or API, with
``VM.Config.Network``). So every plan reads, for each VM whose deny policy the marker
vouches for, what pve-firewall would apply, and compares it with the policy; a difference
becomes the VM's observed ``egress`` ("changed outside sand: …"), which the planner shows
as drift and an in-place ``~ egress`` that :func:`firewall.write` restores.

Four reads a VM, at once (``Ctx.deep_reads`` in flight): its firewall options, its rules,
``sand-egress``'s entries and its config (``netN``). PVE has no cheaper question: each
GET's ``digest`` covers only what that GET returns (``copy_list_with_digest`` and
``copy_opject_with_digest`` in pve-firewall's ``Firewall.pm``), there is no digest of the
whole ``<vmid>.fw`` and no conditional GET, so a digest recorded on this host would save
no request; the answers are compared with the policy instead (docs/egress.md#drift).
VMs without a deny policy cost nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, TypeVar

from sand.backends.proxmox import firewall
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.desired import DesiredVM
from sand.manifest.egress import EgressPolicy
from sand.observed import Observation, ObservedVM, Ownership

# How the observed egress of a VM whose firewall was changed by hand begins.
CHANGED = "changed outside sand"

T = TypeVar("T")


def to_read(observation: Observation, desired: Sequence[DesiredVM]) -> list[ObservedVM]:
    """The VMs whose firewall is read: managed, not locked, and holding (by their marker)
    the deny policy the manifest asks for. A VM whose policy differs anyway is rewritten
    by the plan's change, and read then."""
    by_name = {vm.name: vm for vm in desired}
    out: list[ObservedVM] = []
    for seen in observation.vms:
        want = by_name.get(seen.name)
        if seen.ownership is not Ownership.MANAGED or want is None or seen.lock:
            continue
        if firewall.denies(want.egress) and seen.egress == want.infra().get("egress"):
            out.append(seen)
    return out


async def read_drift(
    ctx: Ctx, observation: Observation, desired: Sequence[DesiredVM]
) -> Observation:
    """``observation`` with the egress of each VM whose firewall differs from its policy
    replaced by what differs; a firewall that cannot be read makes the backend unknown
    (as a config that cannot be read does: nothing is planned on a guess)."""
    checked = to_read(observation, desired)
    if not checked:
        return observation
    start = ctx.client.requests
    policies = {vm.name: vm.egress for vm in desired}
    slots = asyncio.Semaphore(ctx.deep_reads)

    async def one(vm: ObservedVM) -> ObservedVM | str:
        policy = policies[vm.name]
        assert policy is not None
        try:
            why = await difference(ctx, slots, str(vm.node), vm.identity, policy, vm.name)
        except ProxmoxError as e:
            return f"cannot read VM {vm.identity}'s firewall: {e.detail}"
        return dataclasses.replace(vm, egress=f"{CHANGED}: {why}") if why else vm

    results = await asyncio.gather(*(one(vm) for vm in checked))
    problems = [r for r in results if isinstance(r, str)]
    read = {vm.identity: vm for vm in results if isinstance(vm, ObservedVM)}
    vms = tuple(read.get(vm.identity, vm) for vm in observation.vms)
    unknown = "; ".join(filter(None, [observation.unknown_reason, *problems])) or None
    spent = observation.requests + ctx.client.requests - start
    return dataclasses.replace(observation, vms=vms, unknown_reason=unknown, requests=spent)


async def difference(
    ctx: Ctx, slots: asyncio.Semaphore, node: str, vmid: str, policy: EgressPolicy, name: str
) -> str | None:
    """What of ``policy`` the VM's firewall does not hold, in words, or None."""

    async def held(request: Awaitable[T]) -> T:
        async with slots:
            return await request

    base = f"nodes/{node}/qemu/{vmid}"
    fw = f"{base}/firewall"
    options, rules, entries, config = await asyncio.gather(
        held(ctx.client.get(f"{fw}/options")),
        held(ctx.client.get(f"{fw}/rules")),
        held(_entries(ctx, fw)),
        held(ctx.client.get(f"{base}/config")),
    )
    # The rule to the broker is sand's while it goes where the broker is for this VM now.
    want = firewall.rules_of(policy, firewall.proxy_of(ctx, policy), firewall.broker_of(ctx, name))
    found = [
        *_options_differ(options or {}),
        *_nics_differ(config or {}),
        *_rules_differ(rules or [], want),
        *_entries_differ(entries, policy),
    ]
    return "; ".join(found) or None


async def _entries(ctx: Ctx, fw: str) -> list[dict[str, Any]] | None:
    """``sand-egress``'s entries, or None: the ipset is gone."""
    try:
        return list(await ctx.client.get(f"{fw}/ipset/{firewall.IPSET}") or [])
    except ProxmoxError as e:
        if e.kind is ErrorKind.NOT_FOUND:
            return None
        raise


def _options_differ(options: Mapping[str, Any]) -> list[str]:
    if str(options.get("enable", 0)) != "1":
        return ["the VM's firewall is off"]
    return [
        f"{key}={options.get(key, '')} (sand writes {value})"
        for key, value in firewall.OPTIONS.items()
        if key != "enable" and str(options.get(key, "")) != str(value)
    ]


def _nics_differ(config: Mapping[str, Any]) -> list[str]:
    # net0 is the NIC sand filters (firewall.with_firewall), and the one an update puts
    # firewall=1 back on.
    return [] if firewall.nic_filtered(config.get("net0")) else ["net0 without firewall=1"]


def _rules_differ(rules: Sequence[Mapping[str, Any]], want: list[dict[str, Any]]) -> list[str]:
    mine = sorted(firewall.own_rules(rules), key=lambda r: int(r.get("pos", 0)))
    if not mine and want:
        return ["sand's rule removed"]
    if len(mine) != len(want):
        return [f"{len(mine)} rules marked {firewall.RULE_COMMENT!r}, sand writes {len(want)}"]
    changed = sorted(
        {k for rule, wanted in zip(mine, want, strict=True) for k, v in wanted.items()
         if str(rule.get(k, "")) != str(v)}
    )  # fmt: skip
    return [f"sand's rule changed ({', '.join(changed)})"] if changed else []


def _entries_differ(entries: list[dict[str, Any]] | None, policy: EgressPolicy) -> list[str]:
    if not policy.cidrs:
        return []
    if entries is None:
        return [f"ipset {firewall.IPSET} removed"]
    extra = [
        str(e.get("cidr"))
        for e in entries
        if e.get("nomatch")
        or not any(firewall.same_network(c, e.get("cidr")) for c in policy.cidrs)
    ]
    missing = [
        c for c in policy.cidrs if not any(firewall.same_network(c, e.get("cidr")) for e in entries)
    ]
    out = [f"{firewall.IPSET} gained {cidr}" for cidr in extra]
    return out + [f"{firewall.IPSET} lost {cidr}" for cidr in missing]
