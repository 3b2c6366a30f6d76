"""``egress:``: where a VM may send packets, enforced outside the guest (docs/egress.md).

An agent runs as root in its VM, so a rule the guest holds is a rule the agent can lift:
the policy must be enforced where the guest cannot reach (the design: the PVE firewall on
Proxmox, a host-side point on Lima), and a backend that has no such place yet refuses the
VM in the plan instead of pretending (``Capabilities.egress``).

``policy: deny`` (the default once ``egress:`` is written) lets through only the listed
destinations, on the listed ports: ``domains`` (exact names and ``*.`` wildcards) and
``cidrs``. ``policy: allow`` lets everything through, and lists nothing: a VM that opens
what its defaults close.
A VM's own ``egress:`` replaces the defaults' whole.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Self

from pydantic import BeforeValidator, Field, WithJsonSchema, model_validator

from sand.manifest.fields import Strict, empty_list

DENY = "deny"
ALLOW = "allow"
# The ports an allowed destination is reached on when ``ports`` names none: HTTPS only,
# so a domain allowed for its web API is not also a way out on any other service.
DEFAULT_PORTS = (443,)

_LABEL = r"(?!-)[a-z0-9-]{1,63}(?<!-)"
_DOMAIN = re.compile(rf"^(\*\.)?({_LABEL}\.)+{_LABEL}$")
# What canonical_domain takes, as far as the schema can say it (any case, a final dot).
_ANY_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
DOMAIN_PATTERN = rf"^(\*\.)?({_ANY_LABEL}\.)+{_ANY_LABEL}\.?$"
_DOMAIN_HINT = "write a host name such as 'github.com', or '*.npmjs.org' for its subdomains"


def canonical_domain(value: Any) -> str:
    """A domain as sand compares it: lower case, no trailing dot; ``ValueError`` says why
    a value is not one."""
    if not isinstance(value, str):
        raise ValueError(_DOMAIN_HINT)
    name = value.strip().lower().removesuffix(".")
    if "*" in name.removeprefix("*."):
        raise ValueError(f"{value[:60]!r}: a wildcard is only a leading '*.'; {_DOMAIN_HINT}")
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        raise ValueError(f"{value[:60]!r} is an address: list it under cidrs (as {name}/32)")
    if not name.isascii():
        # Names are compared as DNS carries them; the ASCII form says which one is meant.
        try:
            ascii_form = name.encode("idna").decode()
        except UnicodeError:
            raise ValueError(f"{value[:60]!r} is not a domain name: {_DOMAIN_HINT}") from None
        raise ValueError(f"{value[:60]!r}: write its ASCII form {ascii_form!r}")
    if len(name) > 253 or not _DOMAIN.match(name):
        raise ValueError(f"{value[:60]!r} is not a domain name: {_DOMAIN_HINT}")
    return name


def canonical_cidr(value: Any) -> str:
    """A network as sand compares it (``10.0.0.0/8``, ``2001:db8::/32``); a single
    address is its own /32 or /128."""
    if not isinstance(value, str):
        raise ValueError("write a network such as '10.0.0.0/8' or an address such as '192.0.2.7'")
    try:
        network = ipaddress.ip_network(value.strip(), strict=True)
    except ValueError as exc:
        if "host bits set" in str(exc):
            loose = ipaddress.ip_network(value.strip(), strict=False)
            raise ValueError(f"{value[:60]!r} has host bits set: did you mean {loose}?") from None
        raise ValueError(f"{value[:60]!r} is not a network or an address") from None
    if network.prefixlen == 0:
        raise ValueError(f"{value!r} is every address: write policy: allow instead")
    return str(network)


EgressDomain = Annotated[
    str,
    BeforeValidator(canonical_domain),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DOMAIN_PATTERN,
            "examples": ["github.com", "*.npmjs.org"],
            "description": "A domain the VM may reach: an exact name, or '*.' and a name "
            "for every name under it (not the name itself).",
        }
    ),
]
EgressCidr = Annotated[
    str,
    BeforeValidator(canonical_cidr),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^[0-9A-Fa-f:.]+(/[0-9]{1,3})?$",
            "examples": ["10.20.0.0/16", "192.0.2.7", "2001:db8::/48"],
            "description": "A network (IPv4 or IPv6, no host bits set) or one address the "
            "VM may reach.",
        }
    ),
]


def canonical_proxy(value: Any) -> str:
    """A declared egress proxy as sand compares it: ``ADDRESS:PORT``, an IPv4 address of
    this host (the PVE firewall rule that lets the VM reach it names an address, never a
    name, which the guest's side could not pin)."""
    hint = "write this host's IPv4 address and a port, such as '10.20.0.1:3128'"
    if not isinstance(value, str):
        raise ValueError(hint)
    address, sep, port = value.strip().rpartition(":")
    try:
        parsed = ipaddress.IPv4Address(address)
    except ValueError:
        raise ValueError(f"{value[:60]!r} is not ADDRESS:PORT: {hint}") from None
    if not sep or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"{value[:60]!r} has no port from 1 to 65535: {hint}")
    if parsed.is_unspecified or parsed.is_multicast or parsed.is_loopback:
        raise ValueError(f"{value[:60]!r}: a guest cannot reach this host there; {hint}")
    return f"{parsed}:{int(port)}"


EgressProxyEndpoint = Annotated[
    str,
    BeforeValidator(canonical_proxy),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": r"^[0-9.]+:[0-9]{1,5}$",
            "examples": ["10.20.0.1:3128"],
            "description": "Where sand's egress proxy for this backend's guests listens, "
            "on this host: an IPv4 address of the host on the guests' route, and a port. "
            "Declared by whoever runs sand on this host (under sand sync, pinned in "
            "pins.yaml); with it a deny policy may list domains (docs/egress.md#proxmox).",
        }
    ),
]

DESCRIPTION = (
    "Where the VM may send packets, to be enforced outside the guest, where root in it "
    "cannot lift it; a VM whose backend cannot enforce it is refused in the plan (`!`), "
    "never made open. docs/egress.md."
)


class Egress(Strict):
    """What a VM may reach; everything else is dropped and logged on the host."""

    policy: Literal["deny", "allow"] = Field(
        default="deny",
        description="deny (default): only the listed domains and cidrs, on the listed "
        "ports; allow: everything (then nothing is listed).",
        examples=["allow"],
    )
    domains: list[EgressDomain] = Field(
        default_factory=empty_list,
        description="Names the VM may reach: exact, or '*.example.org' for every name "
        "under example.org (not example.org itself).",
        examples=[["github.com", "*.githubusercontent.com"]],
    )
    cidrs: list[EgressCidr] = Field(
        default_factory=empty_list,
        description="Networks or addresses the VM may reach.",
        examples=[["10.20.0.0/16"]],
    )
    ports: list[Annotated[int, Field(ge=1, le=65535)]] | None = Field(
        default=None,
        description="The TCP ports the listed destinations are reached on (default [443]).",
        examples=[[443, 22]],
    )

    @model_validator(mode="after")
    def _allow_lists_nothing(self) -> Self:
        if self.policy == ALLOW and (self.domains or self.cidrs or self.ports):
            raise ValueError(
                "policy 'allow' lets every destination through, so domains, cidrs and "
                "ports would mean nothing: remove them, or write policy: deny"
            )
        return self


@dataclass(frozen=True)
class EgressPolicy:
    """A VM's ``egress:`` as the planner and the backends read it: sorted, deduplicated."""

    policy: str  # DENY | ALLOW
    domains: tuple[str, ...] = ()
    cidrs: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()

    @property
    def summary(self) -> str:
        """How the plan shows it, short at any size (the fingerprint holds the whole)."""
        if self.policy == ALLOW:
            return ALLOW
        parts = [_count(len(self.domains), "domain"), _count(len(self.cidrs), "cidr")]
        ports = ",".join(str(p) for p in self.ports)
        return f"deny except {', '.join(parts)} on port{'s' if len(self.ports) > 1 else ''} {ports}"

    def as_data(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "domains": list(self.domains),
            "cidrs": list(self.cidrs),
            "ports": list(self.ports),
        }


def _count(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def egress_of(own: Egress | None, default: Egress | None) -> EgressPolicy | None:
    """The VM's own ``egress:`` replaces its defaults' whole; None: no policy at all."""
    chosen = own if own is not None else default
    if chosen is None:
        return None
    if chosen.policy == ALLOW:
        return EgressPolicy(ALLOW)
    return EgressPolicy(
        DENY,
        domains=tuple(sorted(set(chosen.domains))),
        cidrs=tuple(sorted(set(chosen.cidrs), key=_network_order)),
        ports=tuple(sorted(set(chosen.ports or DEFAULT_PORTS))),
    )


def _network_order(cidr: str) -> tuple[int, int, int]:
    network = ipaddress.ip_network(cidr)
    return network.version, int(network.network_address), network.prefixlen
