"""A VM's egress policy as the host-side proxy reads it, and the proxy's one decision.

sand writes the policy file (JSON) next to the VM before it starts; the proxy
(``sand.egress.proxy``), one process per connection the guest opens, reads it and
decides each destination it is asked for:

- the port must be one of the policy's ``ports``;
- a name is allowed when it is one of ``domains`` (exact) or under a ``*.`` one; only
  then is it resolved, on the host, by sand's resolver: a name the policy does not
  allow is never looked up (a lookup of ``<secret>.attacker.example`` would carry the
  secret out through the host's DNS);
- an address (an IP literal, or what an allowed name resolves to) is reached only if
  it is inside one of ``cidrs``, or it came from an allowed name and is a public kind
  of address: an allowed name that resolves to the host's loopback, a link-local or
  unspecified address reaches nothing unless the policy lists that network itself.
"""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sand.manifest.egress import EgressPolicy

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Sequence[str]]


@dataclass(frozen=True)
class PolicyFile:
    """What the proxy needs: the VM (for the log), the policy, where denials go."""

    project: str
    backend: str
    vm: str
    summary: str  # the plan's value of the field (``DesiredVM.infra()["egress"]``)
    domains: tuple[str, ...]
    cidrs: tuple[str, ...]
    ports: tuple[int, ...]
    denials: str  # the host's denial log of this VM (JSON lines)

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "project": self.project,
                "backend": self.backend,
                "vm": self.vm,
                "summary": self.summary,
                "domains": list(self.domains),
                "cidrs": list(self.cidrs),
                "ports": list(self.ports),
                "denials": self.denials,
            },
            indent=1,
        ).encode()

    @classmethod
    def of(
        cls, project: str, backend: str, vm: str, summary: str, policy: EgressPolicy, denials: Path
    ) -> PolicyFile:
        return cls(
            project, backend, vm, summary, policy.domains, policy.cidrs, policy.ports, str(denials)
        )


def read_policy(path: Path) -> PolicyFile:
    """The policy file at ``path``; ``ValueError`` when it is not one (the proxy then
    denies everything)."""
    try:
        doc = json.loads(path.read_bytes())
        return PolicyFile(
            project=str(doc["project"]),
            backend=str(doc["backend"]),
            vm=str(doc["vm"]),
            summary=str(doc["summary"]),
            domains=tuple(str(d) for d in doc["domains"]),
            cidrs=tuple(str(c) for c in doc["cidrs"]),
            ports=tuple(int(p) for p in doc["ports"]),
            denials=str(doc["denials"]),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable egress policy {path}: {exc}") from None


@dataclass(frozen=True)
class Decision:
    allowed: bool
    addresses: tuple[str, ...] = ()  # where to connect, in order (allowed only)
    reason: str = ""  # why not (denied only)


def host_resolver(name: str, port: int) -> Sequence[str]:
    """Every address the host's resolver gives ``name`` for a TCP connection."""
    infos = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


def name_allowed(name: str, domains: Sequence[str]) -> bool:
    name = name.lower().removesuffix(".")
    for domain in domains:
        if domain.startswith("*."):
            if name.endswith(domain[1:]) and len(name) > len(domain) - 1:
                return True
        elif name == domain:
            return True
    return False


def _in_cidrs(address: IPAddress, cidrs: Sequence[str]) -> bool:
    for cidr in cidrs:
        network = ipaddress.ip_network(cidr)
        if address.version == network.version and address in network:
            return True
    return False


def _host_side(address: IPAddress) -> bool:
    """An address that names the host itself or no one in particular: a name must not
    lead there unless the policy lists the network."""
    return (
        address.is_loopback
        or address.is_link_local
        or address.is_unspecified
        or address.is_multicast
        or address.is_reserved
    )


def decide(policy: PolicyFile, host: str, port: int, resolve: Resolver = host_resolver) -> Decision:
    """Whether the guest may reach ``host:port``, and at which addresses."""
    if port not in policy.ports:
        return Decision(False, reason=f"port {port} is not allowed")
    literal = host.strip("[]")
    try:
        address = ipaddress.ip_address(literal)
    except ValueError:
        address = None
    if address is not None:
        if _in_cidrs(address, policy.cidrs):
            return Decision(True, (str(address),))
        return Decision(False, reason=f"{address} is in no allowed network")
    if not name_allowed(host, policy.domains):
        return Decision(False, reason=f"{host} is not an allowed name")
    try:
        found = [ipaddress.ip_address(a) for a in resolve(host, port)]
    except (OSError, ValueError) as exc:
        return Decision(False, reason=f"{host} does not resolve: {exc}")
    usable = [a for a in found if not _host_side(a) or _in_cidrs(a, policy.cidrs)]
    if not usable:
        return Decision(False, reason=f"{host} resolves to no address it may reach")
    return Decision(True, tuple(str(a) for a in usable))
