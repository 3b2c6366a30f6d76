"""One host, however it is spelled: what two backends are compared by.

``127.0.0.1``, ``localhost``, ``::1`` and a name in DNS for the same address are one
host; comparing spellings would let two backends share a pool or a Lima home unseen.
Names are resolved only when two backends agree on everything else (the same port and
pool or Lima home), so a manifest of distinct backends costs no lookup.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass


@dataclass(frozen=True)
class Host:
    """A host as a manifest spells it, compared by :func:`same_place`."""

    spelling: str

    def __str__(self) -> str:
        return self.spelling


def host(spelling: str) -> Host:
    return Host(spelling.strip().strip("[]").lower().rstrip("."))


@functools.lru_cache(maxsize=64)
def addresses(name: str) -> frozenset[str]:
    """What ``name`` stands for: its addresses, every loopback address as one (this
    machine), or its spelling alone when it does not resolve."""
    if name == "localhost":
        return frozenset({"loopback"})
    try:
        return frozenset({_canonical(name)})
    except ValueError:
        pass
    import socket  # here, not at the top: only a name that is no address is looked up

    try:
        found = socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return frozenset({name})
    return frozenset(_canonical(str(info[4][0])) for info in found)


def _canonical(address: str) -> str:
    ip = ipaddress.ip_address(address.split("%")[0])
    return "loopback" if ip.is_loopback else ip.compressed


def same_host(a: Host, b: Host) -> bool:
    return a.spelling == b.spelling or bool(addresses(a.spelling) & addresses(b.spelling))


def same_place(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """Two ownership keys name one place: equal, hosts compared as one host however
    they are spelled (looked up last, only when all else is equal)."""
    if len(a) != len(b):
        return False
    pairs = list(zip(a, b, strict=True))
    hosts = [(x, y) for x, y in pairs if isinstance(x, Host) and isinstance(y, Host)]
    if any(x != y for x, y in pairs if not (isinstance(x, Host) and isinstance(y, Host))):
        return False
    return all(same_host(x, y) for x, y in hosts)
