"""HostFirewall: a VM's PVE firewall config made into the host's nftables rules, as
pve-firewall makes it into iptables rules (``src/PVE/Firewall.pm``), on the rig's guests'
bridge, with real packets.

What pve-firewall does with a VM's traffic (``compile_iptables_filter``): qemu-server plugs
a ``firewall=1`` NIC's tap into a bridge of its own (``fwbr{vmid}i{n}``) joined to the
node's bridge by a veth pair, so everything the VM sends -- to another VM, to the world,
to the node itself -- is bridged across it and passes ``FORWARD``: ``PVEFW-FORWARD``
drops conntrack ``INVALID``, accepts ``RELATED,ESTABLISHED``
(``ruleset_chain_add_conn_filters``), and sends what the tap sent to
``PVEFW-FWBR-OUT``, which jumps to the NIC's chain ``tap{vmid}i{n}-OUT`` on ``-m physdev
--physdev-is-bridged --physdev-in tap{vmid}i{n}`` (``generate_tap_rules_direction``). That
chain (``ruleset_create_vm_chain``) lets DHCP out (``dhcp``), drops IPv6 router
advertisements (without ``radv``), lets neighbour discovery out (``ruleset_chain_add_ndp``),
then the VM's enabled ``out`` rules in order (``ruleset_generate_vm_rules``, ACCEPT being
``PVEFW-SET-ACCEPT-MARK``), then the policy (``ruleset_add_chain_policy``): for ``DROP``,
``-j PVEFW-Drop`` (broadcast, multicast and some noise dropped unlogged, critical ICMP let
through) and a final ``-j DROP`` logged ``policy DROP: `` with the vmid
(``get_log_rule_base``). ``generate_tap_layer2filter`` (ebtables) drops frames from the
tap whose source MAC is not the NIC's (``macfilter``, on by default). No VM rule applies
unless the VM's options say ``enable`` and the datacenter's firewall is on
(``PVE::Firewall::update`` removes every chain otherwise).

The rig's taps sit on the hypervisor's bridge directly, and its kernel has no conntrack
in nftables' ``bridge`` family (``nf_conntrack_bridge``), so the rules are split as the
kernel allows, with the same effect: a ``bridge`` table matches the tap as the input port
(the ``physdev-in`` of pve-firewall) at prerouting, drops a foreign source MAC there (the
ebtables filter), and marks the packet with the NIC; ``br_netfilter`` (bridge-nf-call-
iptables/ip6tables, ``enable_bridge_firewall``) then passes the bridged packet through
the IP hooks with conntrack, where an ``inet`` table holds ``PVEFW-FORWARD``,
``PVEFW-FWBR-OUT`` and the tap chains, matched on the mark at prerouting, after conntrack:
on PVE every packet from the tap crosses the fwbr and so passes ``FORWARD`` (to the node's
own addresses too), while here what the VM sends to the host would reach ``input``, and
what it routes through the host would be dropped unlogged by the host's routing (no
forwarding) before ``forward``.

Not modelled (refused with RigError, never silently open): the IN direction other than
``policy_in: ACCEPT`` with no ``in`` rule, security groups, macros, aliases, ``nomatch``
ipset entries, ``icmp-type``, ``ipfilter``.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.rig._util import RigError, run
from tests.rig.nflog import NflogReader

# The NIC marks: base | slot << 16 | vmid << 4 | n (below pve-firewall's accept bit). The
# slot is the hypervisor's own: two tests' fakepves both number their first VM 101, and
# every table's hook sees every bridged packet, so one hypervisor's rules must never match
# another's marks (found when two such tests ran at once and each dropped the other's).
MARK_BASE = 0x5A000000
HOST_MASK = 0xFFFF0000
SLOTS = 256
SLOT_LOCKS = Path("/run/sand-rig/pvefw-slots")
LOG_LEVELS = {
    "emerg": 0,
    "alert": 1,
    "crit": 2,
    "err": 3,
    "warning": 4,
    "notice": 5,
    "info": 6,
    "debug": 7,
}
SERVICES = {"ssh": 22, "domain": 53, "http": 80, "https": 443}
BRIDGE_NF = ("bridge-nf-call-iptables", "bridge-nf-call-ip6tables")

# PVEFW-Drop and PVEFW-DropBroadcast ($pve_std_chains_conf, both IP versions): dropped
# without a log line; fragmentation-needed, time-exceeded (and packet-too-big) let through.
PVEFW_DROP = """
    meta pkttype { broadcast, multicast } drop
    ip daddr 224.0.0.0/4 drop
    ip6 daddr ff00::/8 drop
    tcp dport 43 meta nfproto ipv6 reject with tcp reset
    icmp type { destination-unreachable, time-exceeded } accept
    icmpv6 type { destination-unreachable, time-exceeded, packet-too-big } accept
    ct state invalid drop
    udp dport { 135, 445 } drop
    udp dport 137-139 drop
    udp sport 137 udp dport 1024-65535 drop
    tcp dport { 135, 139, 445 } drop
    udp dport 1900 drop
    tcp flags & (fin | syn | rst | ack) != syn drop
    udp sport 53 drop
"""


@dataclass
class Nic:
    vmid: int
    n: int
    tap: str  # the rig's tap device of netN
    mac: str

    @property
    def chain(self) -> str:
        return f"tap{self.vmid}i{self.n}-OUT"  # pve-firewall's name for it

    def mark(self, slot: int) -> int:
        """The mark of this NIC's packets on the hypervisor holding ``slot``."""
        if self.vmid >= 1 << 12 or self.n >= 16:
            raise RigError(f"VM {self.vmid} net{self.n}: beyond the rig's packet marks")
        return MARK_BASE | slot << 16 | self.vmid << 4 | self.n


def _ports(text: str) -> str:
    """A PVE port list (``22,443``, ``1000:2000``, service names) in nft's form."""
    out = []
    for part in str(text).split(","):
        lo, _, hi = part.strip().partition(":")
        lo = str(SERVICES.get(lo, lo))
        out.append(f"{lo}-{SERVICES.get(hi, hi)}" if hi else lo)
    return "{ " + ", ".join(out) + " }"


def _addresses(text: str, ipsets: dict[str, Any], vmid: int, side: str) -> dict[int, str]:
    """A rule's source or dest per IP version: {4: "ip daddr …", 6: …}."""
    if text.startswith("+"):
        name = re.sub(r"^\+(guest/)?", "", text)
        if name not in ipsets:
            raise RigError(f"VM {vmid}: rule names ipset {text}, which it has not")
        return {v: f"ip{'' if v == 4 else '6'} {side} @{_set_name(vmid, name, v)}" for v in (4, 6)}
    nets: dict[int, list[str]] = {4: [], 6: []}
    for part in text.split(","):
        try:
            net = ipaddress.ip_network(part.strip(), strict=False)
        except ValueError as exc:
            raise RigError(f"VM {vmid}: the rig does not model address {part!r}") from exc
        nets[net.version].append(str(net))
    return {
        v: f"ip{'' if v == 4 else '6'} {side} {{ {', '.join(n)} }}" for v, n in nets.items() if n
    }


def _set_name(vmid: int, name: str, version: int) -> str:
    return f"vm{vmid}_{name.replace('-', '_')}_v{version}"


def _rule(rule: dict[str, Any], ipsets: dict[str, Any], nic: Nic) -> list[str]:
    """One enabled ``out`` rule (``ruleset_generate_vm_rules``), per IP version it applies to."""
    for key in ("macro", "icmp-type"):
        if rule.get(key):
            raise RigError(f"VM {nic.vmid}: the rig does not model a rule's {key}")
    action = {"ACCEPT": "accept", "DROP": "drop", "REJECT": "reject"}[str(rule["action"])]
    matches: dict[int, list[str]] = {4: [], 6: []}
    for field, side in (("source", "saddr"), ("dest", "daddr")):
        if rule.get(field):
            by_version = _addresses(str(rule[field]), ipsets, nic.vmid, side)
            matches = {v: [*m, by_version[v]] for v, m in matches.items() if v in by_version}
    proto = str(rule.get("proto") or "")
    tail = []
    if proto:
        tail.append(f"meta l4proto {proto}")
    for field, nft in (("sport", "sport"), ("dport", "dport")):
        if rule.get(field):
            if proto not in ("tcp", "udp"):
                raise RigError(f"VM {nic.vmid}: ports without tcp/udp are not modelled")
            tail.append(f"{proto} {nft} {_ports(str(rule[field]))}")
    family = {4: "ipv4", 6: "ipv6"}
    return [" ".join([f"meta nfproto {family[v]}", *m, *tail, action]) for v, m in matches.items()]


def vm_chain(nic: Nic, vm: dict[str, Any]) -> list[str]:
    """The body of ``tap{vmid}i{n}-OUT`` (``generate_tap_rules_direction``, OUT)."""
    options, ipsets = vm.get("options") or {}, vm.get("ipset") or {}
    if options.get("ipfilter") or f"ipfilter-net{nic.n}" in ipsets:
        raise RigError(f"VM {nic.vmid}: the rig does not model ipfilter")
    if str(options.get("policy_in") or "DROP") != "ACCEPT" or any(
        r.get("enable") and r.get("type") in ("in", "group") for r in vm.get("rules") or []
    ):
        raise RigError(f"VM {nic.vmid}: the rig models the OUT direction only (policy_in ACCEPT)")
    body = []
    # ruleset_create_vm_chain
    if options.get("dhcp", 1) not in (0, "0"):
        body += ["meta nfproto ipv4 udp sport 68 udp dport 67 accept",
                 "meta nfproto ipv6 udp sport 546 udp dport 547 accept"]  # fmt: skip
    if not options.get("radv"):
        body.append("icmpv6 type nd-router-advert drop")
    if options.get("ndp", 1) not in (0, "0"):  # ruleset_chain_add_ndp
        body.append(
            "icmpv6 type { nd-router-solicit, nd-neighbor-solicit, nd-neighbor-advert } accept"
        )
    for rule in vm.get("rules") or []:  # ruleset_generate_vm_rules
        if rule.get("enable") and rule.get("type") == "out":
            if rule.get("iface") and rule["iface"] != f"net{nic.n}":
                continue
            body += _rule(rule, ipsets, nic)
    # ruleset_add_chain_policy
    policy = str(options.get("policy_out") or "ACCEPT")
    if policy == "ACCEPT":
        body.append("accept")
    else:
        level = LOG_LEVELS.get(str(options.get("log_level_out") or "nolog"))
        body.append("jump PVEFW-Drop")
        if level is not None:
            # get_log_rule_base: ":$vmid:$loglevel:$chain: $msg"
            prefix = f":{nic.vmid}:{level}:{nic.chain}: policy {policy}: "
            body.append(f'log prefix "{prefix}" group {{group}}')
        body.append("drop" if policy == "DROP" else "reject")
    return body


def ipset_sets(vmid: int, ipsets: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The VM's ipsets as nft sets, one per IP version (``generate_ipset_chains``: PVE
    makes ``PVEFW-<vmid>-<name>-v4`` and ``-v6``)."""
    out = []
    for name, entries in ipsets.items():
        if any(e.get("nomatch") for e in entries):
            raise RigError(f"VM {vmid}: the rig does not model nomatch")
        nets = [ipaddress.ip_network(e["cidr"], strict=False) for e in entries]
        for v, kind in ((4, "ipv4_addr"), (6, "ipv6_addr")):
            mine = ", ".join(str(n) for n in nets if n.version == v)
            elements = f" elements = {{ {mine} }};" if mine else ""
            out.append(
                f"  set {_set_name(vmid, name, v)} {{ type {kind}; flags interval;{elements} }}"
            )
    return out


class HostFirewall:
    """The nftables rules of one hypervisor's VMs; ``apply`` after every change."""

    def __init__(self, ident: str, bridge: str, directory: Path) -> None:
        self.table = f"sandpvefw{ident}"
        self.bridge = bridge
        self.group = 1 + int(ident, 16)  # one netlink log group per hypervisor (hex ident)
        self.script = directory / "pve-firewall.nft"
        self.vms: dict[int, tuple[list[Nic], dict[str, Any]]] = {}
        self.reader = NflogReader(self.group)
        self.slot = -1
        self._slot_lock: int | None = None

    def __enter__(self) -> HostFirewall:
        for name in BRIDGE_NF:  # br_netfilter: bridged packets pass the IP hooks
            path = Path("/proc/sys/net/bridge") / name
            if path.read_text().strip() != "1":
                path.write_text("1\n")
        self._take_slot()
        self.reader.__enter__()
        self._load()
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop_tables(self.table.removeprefix("sandpvefw"))
        self.reader.__exit__()
        if self._slot_lock is not None:
            os.close(self._slot_lock)  # the lock goes with it (as with a process that died)
            self._slot_lock = None

    def _take_slot(self) -> None:
        """A mark slot no other live hypervisor of the rig holds, in any process: the
        first of SLOTS lock files this one can lock."""
        SLOT_LOCKS.mkdir(parents=True, exist_ok=True)
        for slot in range(SLOTS):
            fd = os.open(SLOT_LOCKS / str(slot), os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.slot, self._slot_lock = slot, fd
            return
        raise RigError(f"all {SLOTS} of the rig's firewall mark slots are held")

    def apply(self, vmid: int, nics: list[Nic], state: dict[str, Any]) -> None:
        """The VM's rules from ``state`` (``cluster``: the datacenter's options, ``vm``:
        the VM's firewall config), replacing what it had, in one nft transaction."""
        before = self.vms.get(vmid)
        self.vms[vmid] = (nics, state)
        try:
            self._load()
        except RigError:  # what it cannot model: the VM keeps what it had (none: no start)
            if before is None:
                del self.vms[vmid]
            else:
                self.vms[vmid] = before
            raise

    def plug(
        self, vmid: int, config: dict[str, Any], tap: str, mac: str, state: dict[str, Any]
    ) -> None:
        """``apply`` for a VM whose net0 the rig plugged as ``tap`` (the one NIC it plugs)."""
        self.apply(vmid, nics_of(vmid, config, {0: (tap, mac)}), state)

    @staticmethod
    def drop_tables(ident: str) -> None:
        """The tables of hypervisor ``ident`` (gone, or a dead test's)."""
        for family in ("bridge", "inet"):
            run(["nft", "delete", "table", family, f"sandpvefw{ident}"], check=False)

    def remove(self, vmid: int) -> None:
        if self.vms.pop(vmid, None) is not None:
            self._load()

    def ruleset(self) -> str:
        l2, dispatch, chains, sets = [], [], [], []
        for vmid, (nics, state) in sorted(self.vms.items()):
            vm = state.get("vm") or {}
            if not (state.get("cluster") or {}).get("enable"):
                continue  # PVE::Firewall::update: nothing while the datacenter's is off
            if not (vm.get("options") or {}).get("enable"):
                continue
            sets += ipset_sets(vmid, vm.get("ipset") or {})
            for nic in nics:
                # counted: PVE logs no ebtables drop, the rig's tests count them
                l2.append(f'    iifname "{nic.tap}" ether saddr != {nic.mac} counter drop')
                mark = nic.mark(self.slot)
                l2.append(f'    iifname "{nic.tap}" meta mark set {mark:#x}')
                dispatch.append(f"    meta mark {mark:#x} jump {nic.chain}")
                body = "".join(f"    {line}\n" for line in vm_chain(nic, vm))
                chains.append(
                    f"  chain {nic.chain} {{\n{body}  }}".replace("{group}", str(self.group))
                )
        nl = "\n"
        hook = (
            f'    iifname "{self.bridge}" meta mark & {HOST_MASK:#x} == '
            f"{MARK_BASE | self.slot << 16:#x} jump PVEFW-FORWARD"
        )
        return f"""table bridge {self.table} {{}}
delete table bridge {self.table}
table bridge {self.table} {{
  chain prerouting {{
    type filter hook prerouting priority -200; policy accept;
{nl.join(l2)}
  }}
}}
table inet {self.table} {{}}
delete table inet {self.table}
table inet {self.table} {{
{nl.join(sets)}
  chain prerouting {{
    type filter hook prerouting priority -150; policy accept;
{hook}
  }}
  chain PVEFW-FORWARD {{
    ct state invalid drop
    ct state related,established accept
    jump PVEFW-FWBR-OUT
  }}
  chain PVEFW-FWBR-OUT {{
{nl.join(dispatch)}
  }}
  chain PVEFW-Drop {{{PVEFW_DROP}  }}
{nl.join(chains)}
}}
"""

    def _load(self) -> None:
        self.script.write_text(self.ruleset())
        run(["nft", "-f", self.script])

    def foreign_macs_dropped(self, vmid: int) -> int:
        """Packets from the VM's taps dropped for a source MAC not the NIC's (macfilter)."""
        out = run(["nft", "-j", "list", "chain", "bridge", self.table, "prerouting"]).stdout
        taps = {nic.tap for nic in self.vms.get(vmid, ([], {}))[0]}
        dropped = 0
        for item in json.loads(out)["nftables"]:
            exprs = (item.get("rule") or {}).get("expr") or []
            words = json.dumps(exprs)
            if any(f'"{tap}"' in words for tap in taps) and '"drop"' in words:
                dropped += sum(e["counter"]["packets"] for e in exprs if "counter" in e)
        return dropped

    def log(self, vmid: int) -> list[str]:
        """The VM's lines of the host's firewall log (pvefw-logger's format)."""
        return [d.line() for d in self.reader.of(vmid)]


def nics_of(vmid: int, config: dict[str, Any], taps: dict[int, tuple[str, str]]) -> list[Nic]:
    """The VM's NICs with ``firewall=1`` that the rig plugged (``taps``: n -> (tap, mac))."""
    out = []
    for key, value in config.items():
        m = re.fullmatch(r"net(\d+)", key)
        if m and "firewall=1" in str(value).split(",") and int(m.group(1)) in taps:
            tap, mac = taps[int(m.group(1))]
            out.append(Nic(vmid, int(m.group(1)), tap, mac))
    return out
