"""Where provisioning reaches a guest: its net0 address, from the guest agent.

Called only when provisioning, never while observing. Waits (bounded, with
backoff) for the agent to start and DHCP to answer, and refuses an address
another VM of this run was already given (a stale lease, an IP conflict).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from sand import activity, clock
from sand.backends.proxmox import vmops
from sand.backends.proxmox.context import Ctx
from sand.backends.proxmox.errors import ProxmoxError
from sand.backends.proxmox.observe import read_config
from sand.desired import DesiredVM
from sand.guest.endpoint import GuestEndpoint
from sand.observed import ObservedVM


def pick_address(interfaces: Any, mac: str) -> str | None:
    """The first usable IPv4 address of the interface with this MAC."""
    for iface in interfaces or []:
        if not isinstance(iface, dict):
            continue
        if str(iface.get("hardware-address", "")).lower() != mac.lower():
            continue
        for addr in iface.get("ip-addresses") or []:
            if addr.get("ip-address-type") != "ipv4":
                continue
            try:
                ip = ipaddress.IPv4Address(str(addr.get("ip-address")))
            except ValueError:
                continue
            if not (ip.is_loopback or ip.is_link_local or ip.is_unspecified):
                return str(ip)
    return None


async def endpoint(
    ctx: Ctx, vm: DesiredVM | None, current: ObservedVM, *, wait: float | None = None
) -> GuestEndpoint:
    node, vmid = current.node or "", current.identity
    name = vm.name if vm is not None else current.name
    config = await read_config(ctx, node, vmid)
    # A VM the manifest no longer names: cloud-init's user is the one sand set.
    user = vm.user if vm is not None else str(config.get("ciuser") or "")
    if not user:
        raise ProxmoxError(ctx.name, f"VM {vmid} ({name}) has no cloud-init user to log in as")
    mac = vmops.mac_of(config.get("net0"))
    if mac is None:
        raise ProxmoxError(ctx.name, f"VM {vmid} ({name}) has no net0 MAC address to look up")
    path = f"{vmops.vm_path(node, vmid)}/agent/network-get-interfaces"
    patience = ctx.timeouts.agent if wait is None else wait
    activity.step("waiting for the guest agent to report an address", limit=patience)
    deadline = clock.monotonic() + patience
    delay, cap = ctx.agent_poll
    while True:
        why = ""
        try:
            answer = await ctx.client.request("GET", path, retry=False)
            ip = pick_address((answer or {}).get("result"), mac)
            if ip is not None:
                break
            why = f"the guest reports no IPv4 address on net0 ({mac}) yet"
        except ProxmoxError as e:
            if e.status in (400, 401, 403, 501):
                raise
            why = e.detail
        if clock.monotonic() + delay > deadline:
            raise ProxmoxError(
                ctx.name,
                f"VM {vmid} ({name}): no address from the guest agent after {patience:.0f}s: {why}",
                transient=True,
            )
        await clock.sleep(delay)
        delay = min(cap, delay * 2)
    holder = ctx.addresses.get(ip)
    if holder is not None and holder != vmid:
        raise ProxmoxError(
            ctx.name,
            f"VM {vmid} ({name}) reports address {ip}, which VM {holder} also claims; "
            "refusing to provision over an ambiguous address",
        )
    ctx.addresses[ip] = vmid
    return GuestEndpoint(
        host=ip,
        port=22,
        user=user,
        identity=str(ctx.identity),
        host_key_policy="none",
        host_key_alias=f"{ctx.name}-{vmid}",
    )
