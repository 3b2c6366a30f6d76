"""What a VM may do through the broker: one grant per brokered secret its repos name.

A repo whose ``token`` is a brokered secret (``deliver: broker``) is fetched and
pushed through the host's broker; the grant carries that secret's rules, never
its value. The guest's git is pointed at the broker for each grant's hosts; the
GitHub API operations and the plain HTTPS hosts a grant allows are reached at the
broker's URL by any HTTP client.
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
    api: tuple[str, ...] = ()  # GitHub API operations on the repositories
    https_hosts: tuple[str, ...] = ()  # hosts a plain HTTPS client may reach with it
    header: str = ""  # 'Name: value' with '{token}', added to requests to https_hosts

    @property
    def hosts(self) -> tuple[str, ...]:
        """``host[:port]`` of each repository: the guest's git goes to the broker for them."""
        return tuple(sorted({urlsplit(u).netloc.lower() for u in self.repositories}))

    def as_data(self) -> dict[str, object]:
        data: dict[str, object] = {
            "secret": self.secret,
            "repositories": list(self.repositories),
            "push": list(self.push),
        }
        # Only when granted: a grant of git alone fingerprints as it did before.
        if self.api:
            data["api"] = list(self.api)
        if self.https_hosts:
            data["hosts"] = list(self.https_hosts)
            data["header"] = self.header_name
        return data

    @property
    def header_name(self) -> str:
        return self.header.partition(":")[0].strip()

    def summary(self) -> str:
        parts = []
        if self.repositories:
            push = ", ".join(self.push) if self.push else "nothing (fetch only)"
            parts += [f"fetch {', '.join(self.repositories)}", f"push {push}"]
        if self.api:
            parts.append(f"api {', '.join(self.api)}")
        if self.https_hosts:
            parts.append(f"https {', '.join(self.https_hosts)} ({self.header_name})")
        return f"{self.secret}: {'; '.join(parts)}"


def grants_for(m: Manifest, repo_names: list[str]) -> tuple[BrokerGrant, ...]:
    """The grants of a VM cloning ``repo_names``: one per brokered secret they name."""
    grants = set()
    for name in repo_names:
        token = m.repos[name].token
        secret = m.secrets.get(token) if token else None
        if token is None or secret is None or secret.deliver != "broker" or not secret.broker:
            continue
        rules = secret.broker
        grants.add(
            BrokerGrant(
                token,
                tuple(rules.repositories),
                tuple(rules.push),
                tuple(rules.api),
                tuple(h.lower() for h in rules.hosts),
                rules.header if rules.hosts else "",
            )
        )
    return tuple(sorted(grants))


def with_grants(content: dict[str, object], grants: tuple[BrokerGrant, ...]) -> dict[str, object]:
    """A VM's guest content with its grants, only when it has any: the guest
    fingerprints of VMs without one stay what they were before brokering existed."""
    if not grants:
        return content
    return content | {"brokered": [g.as_data() for g in grants]}
