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
- for a policy with ``domains`` (refused in the plan unless the backend declares
  ``egress_proxy``): one ``out`` rule ``ACCEPT`` to the proxy's address and port, the
  VM's only way to a name, and the VM's policy file on this host, where the proxy reads
  it (``sand.egress.registry``);
- ``firewall=1`` on ``net0``, in the config write the create already sends.

For a VM with brokered secrets, one more ``out`` rule ``ACCEPT`` to the broker's address
and port (tcp), where :func:`open_to_broker` puts it once the apply has granted the VM,
before the delivery that uses the broker: none before the first start (the broker is
not asked for the VM until then), and its destination the VM's entry in the broker's
state (``sand.broker.store.reached_at``), so the drift read and a policy rewrite expect
the very rule the apply wrote.

A changed policy changes only what differs (the ipset's entries one by one, sand's rule
where it stands; the operator's rules are kept); an ``allow`` policy removes sand's rule
and ipset and turns the VM's firewall off (``enable=0``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from sand.broker.store import reached_at
from sand.desired import DesiredVM
from sand.egress import registry
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


async def write(ctx: Ctx, node: str, vmid: str | int, vm: DesiredVM, *, fresh: bool) -> None:
    """The VM's firewall as ``vm``'s policy says; ``fresh``: a clone sand just made,
    which holds none of sand's rules yet (nothing to read or remove first)."""
    fw = f"nodes/{node}/qemu/{vmid}/firewall"
    policy = vm.egress
    if not denies(policy):
        await _remove_own(ctx, fw, _NOTHING if fresh else await _read(ctx, fw))
        await ctx.client.put(f"{fw}/options", enable=0)
        return
    assert policy is not None
    proxy = proxy_of(ctx, policy)
    if proxy is not None:
        # Where the proxy reads it, before the rule that lets the VM reach the proxy.
        summary = str(vm.infra()["egress"])
        registry.write_policy(ctx.project, ctx.name, vm.name, summary, policy)
    # Written whatever they were: one request, as a read of them would be, and it puts
    # back what a hand may have changed.
    await ctx.client.put(f"{fw}/options", **OPTIONS)
    held = _NOTHING if fresh else await _read(ctx, fw)
    # A fresh clone has not started: no broker rule before its first start.
    broker = None if fresh else broker_of(ctx, vm.name)
    await _converge(ctx, fw, policy, rules_of(policy, proxy, broker), held)


def proxy_of(ctx: Ctx, policy: EgressPolicy) -> str | None:
    """The egress proxy ``policy``'s names go through: the backend's, when it has domains."""
    return ctx.config.egress_proxy if policy.domains else None


Rule = TypeVar("Rule", bound=Mapping[str, Any])


def own_rules(rules: Iterable[Rule]) -> tuple[Rule, ...]:
    """sand's rules among a VM's firewall rules (an operator's are not)."""
    return tuple(r for r in rules if r.get("comment") == RULE_COMMENT)


def broker_of(ctx: Ctx, name: str) -> tuple[str, int] | None:
    """The broker's address and port for VM ``name``, while it has an entry there."""
    return reached_at(ctx.project, name)


async def open_to_broker(ctx: Ctx, node: str, vmid: str | int, vm: DesiredVM) -> None:
    """sand's rules of a deny-policy VM with its rule to the broker where the broker is
    for it now (added, moved after a broker's restart, or removed with its last
    brokered grant): one read of the rules, then only what differs. The VM's options
    and ipset are the policy's write's, untouched here."""
    policy = vm.egress
    if not denies(policy):
        return
    assert policy is not None
    fw = f"nodes/{node}/qemu/{vmid}/firewall"
    rules = await ctx.client.get(f"{fw}/rules") or []
    want = rules_of(policy, proxy_of(ctx, policy), broker_of(ctx, vm.name))
    await _converge_rules(ctx, fw, want, own_rules(rules))


OPTIONS = {
    "enable": 1,
    "policy_out": "DROP",
    "policy_in": "ACCEPT",
    "dhcp": 1,
    "log_level_out": "info",
}


@dataclass(frozen=True)
class _Held:
    """What of sand's a VM's firewall holds: its rules (with their positions), and
    whether its ipset is there."""

    rules: tuple[dict[str, Any], ...]
    ipset: bool


_NOTHING = _Held((), False)  # a clone sand just made


async def _read(ctx: Ctx, fw: str) -> _Held:
    rules = await ctx.client.get(f"{fw}/rules") or []
    names = {s.get("name") for s in await ctx.client.get(f"{fw}/ipset") or []}
    return _Held(own_rules(rules), IPSET in names)


def rules_of(
    policy: EgressPolicy, proxy: str | None, broker: tuple[str, int] | None = None
) -> list[dict[str, Any]]:
    """sand's rules, in order: out to the ipset on the policy's TCP ports (when it lists
    cidrs), out to the egress proxy (when it lists domains and one is declared), out to
    the broker (when the VM has brokered grants and the broker is known for it)."""
    rules = []
    if policy.cidrs:
        rules.append(
            {
                "type": "out",
                "action": "ACCEPT",
                "dest": f"+{IPSET}",
                "proto": "tcp",
                "dport": ",".join(str(p) for p in policy.ports),
                "enable": 1,
                "comment": RULE_COMMENT,
            }
        )
    if proxy is not None:
        address, _, port = proxy.rpartition(":")
        rules.append(_accept_to(address, port))
    if broker is not None:
        rules.append(_accept_to(broker[0], str(broker[1])))
    return rules


def _accept_to(address: str, port: str) -> dict[str, Any]:
    return {
        "type": "out",
        "action": "ACCEPT",
        "dest": address,
        "proto": "tcp",
        "dport": port,
        "enable": 1,
        "comment": RULE_COMMENT,
    }


def same_network(a: object, b: object) -> bool:
    # PVE stores a single address without its /32 (or /128).
    try:
        return ipaddress.ip_network(str(a), strict=False) == ipaddress.ip_network(
            str(b), strict=False
        )
    except ValueError:
        return str(a) == str(b)


async def _converge(
    ctx: Ctx, fw: str, policy: EgressPolicy, want: list[dict[str, Any]], held: _Held
) -> None:
    """Change only what differs from what the VM's firewall holds: the ipset's entries
    added or removed one by one and sand's rules updated where they stand, so a policy
    that gains a CIDR costs its entry, not a rewrite of the whole (PVE takes one entry
    or rule per request). sand's rules in another number than wanted (one removed by
    hand, a policy that gained or lost its proxy) are removed and written anew; an
    operator's rules stay. A fresh clone holds nothing: everything is written."""
    if policy.cidrs:
        await _converge_ipset(ctx, fw, policy, held)
    await _converge_rules(ctx, fw, want, held.rules)
    if not policy.cidrs and held.ipset:
        await ctx.client.delete(f"{fw}/ipset/{IPSET}", force=1)


async def _converge_rules(
    ctx: Ctx, fw: str, want: list[dict[str, Any]], held: tuple[dict[str, Any], ...]
) -> None:
    if len(held) == len(want):
        ordered = sorted(held, key=lambda r: int(r.get("pos", 0)))
        for rule, wanted in zip(ordered, want, strict=True):
            if any(str(rule.get(k, "")) != str(v) for k, v in wanted.items()):
                await ctx.client.put(f"{fw}/rules/{int(rule['pos'])}", **wanted)
        return
    await _remove_rules(ctx, fw, held)
    # PVE puts each new rule at the top (``create_rule``'s ``unshift``): the last
    # one first, so they stand in their order.
    for wanted in reversed(want):
        await ctx.client.post(f"{fw}/rules", **wanted, pos=0)


async def _converge_ipset(ctx: Ctx, fw: str, policy: EgressPolicy, held: _Held) -> None:
    entries: list[dict[str, Any]] = []
    if held.ipset:
        entries = list(await ctx.client.get(f"{fw}/ipset/{IPSET}") or [])
    else:
        await ctx.client.post(f"{fw}/ipset", name=IPSET, comment=RULE_COMMENT)
    for cidr in policy.cidrs:
        if not any(same_network(cidr, e.get("cidr")) for e in entries):
            await ctx.client.post(f"{fw}/ipset/{IPSET}", cidr=cidr)
    for entry in entries:
        if not any(same_network(cidr, entry.get("cidr")) for cidr in policy.cidrs):
            await ctx.client.delete(f"{fw}/ipset/{IPSET}/{entry['cidr']}")


async def _remove_rules(ctx: Ctx, fw: str, rules: tuple[dict[str, Any], ...]) -> None:
    """sand's ``rules``, highest position first: each removal shifts those below."""
    for rule in sorted(rules, key=lambda r: int(r.get("pos", 0)), reverse=True):
        await ctx.client.delete(f"{fw}/rules/{int(rule['pos'])}")


async def _remove_own(ctx: Ctx, fw: str, held: _Held) -> None:
    """sand's rules and its ipset (the rules first: they refer to it); an operator's
    stay."""
    await _remove_rules(ctx, fw, held.rules)
    if held.ipset:
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
