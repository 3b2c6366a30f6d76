"""What a VM may do through the broker: one grant per brokered secret its repos name.

A repo whose ``token`` is a brokered secret (``deliver: broker``) is fetched and
pushed through the host's broker; the grant carries that secret's rules, never
its value. The guest's git is pointed at the broker for each grant's hosts.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from sand.manifest.models import Manifest


@dataclass(frozen=True, order=True)
class BrokerGrant:
    """A brokered secret a VM uses, with what the broker lets it do."""

    secret: str
    repositories: tuple[str, ...]  # https:// URLs, as the manifest writes them
    push: tuple[str, ...]  # branch patterns

    @property
    def hosts(self) -> tuple[str, ...]:
        """``host[:port]`` of each repository: the guest's git goes to the broker for them."""
        return tuple(sorted({urlsplit(u).netloc.lower() for u in self.repositories}))

    def as_data(self) -> dict[str, object]:
        return {
            "secret": self.secret,
            "repositories": list(self.repositories),
            "push": list(self.push),
        }

    def summary(self) -> str:
        push = ", ".join(self.push) if self.push else "nothing (fetch only)"
        return f"{self.secret}: fetch {', '.join(self.repositories)}; push {push}"


def grants_for(m: Manifest, repo_names: list[str]) -> tuple[BrokerGrant, ...]:
    """The grants of a VM cloning ``repo_names``: one per brokered secret they name."""
    grants = set()
    for name in repo_names:
        token = m.repos[name].token
        secret = m.secrets.get(token) if token else None
        if token is None or secret is None or secret.deliver != "broker" or not secret.broker:
            continue
        rules = secret.broker
        grants.add(BrokerGrant(token, tuple(rules.repositories), tuple(rules.push)))
    return tuple(sorted(grants))


def with_grants(content: dict[str, object], grants: tuple[BrokerGrant, ...]) -> dict[str, object]:
    """A VM's guest content with its grants, only when it has any: the guest
    fingerprints of VMs without one stay what they were before brokering existed."""
    if not grants:
        return content
    return content | {"brokered": [g.as_data() for g in grants]}
