"""What a VM may do through the broker: one grant per brokered secret it names.

A VM is granted a brokered secret (``deliver: broker``) two ways: a repo it clones
whose ``token`` names it (fetched and pushed through the host's broker), or its own
``secrets:`` entry naming it (the guest gets, at that entry's scope, the variables
that say where the broker is and where its credential is, never the value). Either
way the grant carries that secret's whole rules, never its value. The guest's git is
pointed at the broker for each grant's hosts; the GitHub API operations and the plain
HTTPS hosts a grant allows are reached at the broker's URL by any HTTP client.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from sand.desired.parts import norm_path
from sand.manifest.broker import broker_variables
from sand.manifest.models import Manifest
from sand.manifest.vm import SecretUse


@dataclass(frozen=True, order=True)
class BrokerGrant:
    """A brokered secret a VM uses, with what the broker lets it do."""

    secret: str
    repositories: tuple[str, ...]  # https:// URLs, as the manifest writes them
    push: tuple[str, ...]  # branch patterns
    api: tuple[str, ...] = ()  # GitHub API operations on the repositories
    https_hosts: tuple[str, ...] = ()  # hosts a plain HTTPS client may reach with it
    header: str = ""  # 'Name: value' with '{token}', added to requests to https_hosts
    # (scope, variable) of each ``secrets:`` entry of the VM naming it: the guest's
    # directories where the broker's variables are set (broker_variables).
    env: tuple[tuple[str, str], ...] = ()

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
        if self.env:
            data["env"] = [{"scope": scope, "env": env} for scope, env in self.env]
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
        for scope, env in self.env:
            parts.append(f"{broker_variables(env)[0]} at {scope}")
        return f"{self.secret}: {'; '.join(parts)}"


def grants_for(
    m: Manifest, repo_names: Iterable[str], uses: Iterable[SecretUse] = ()
) -> tuple[BrokerGrant, ...]:
    """The grants of a VM cloning ``repo_names`` and placing ``uses`` (its ``secrets:``):
    one per brokered secret they name, with the scopes its uses place it at."""
    grants: dict[str, BrokerGrant] = {}
    for name in repo_names:
        token = m.repos[name].token
        if token is not None and (grant := _grant(m, token)) is not None:
            grants[token] = grant
    for use in uses:
        grant = grants.get(use.name) or _grant(m, use.name)
        if grant is not None:
            place = (norm_path(use.scope), use.env or use.name)
            env = grant.env if place in grant.env else tuple(sorted({*grant.env, place}))
            grants[use.name] = replace(grant, env=env)
    return tuple(sorted(grants.values()))


def tmpfs_uses(m: Manifest, uses: Iterable[SecretUse]) -> list[SecretUse]:
    """``uses`` less those of brokered secrets: the values that go to the guest's tmpfs."""
    return [u for u in uses if _grant(m, u.name) is None]


def _grant(m: Manifest, name: str) -> BrokerGrant | None:
    secret = m.secrets.get(name)
    if secret is None or secret.deliver != "broker" or not secret.broker:
        return None
    rules = secret.broker
    return BrokerGrant(
        name,
        tuple(rules.repositories),
        tuple(rules.push),
        tuple(rules.api),
        tuple(h.lower() for h in rules.hosts),
        rules.header if rules.hosts else "",
    )


def with_grants(content: dict[str, object], grants: tuple[BrokerGrant, ...]) -> dict[str, object]:
    """A VM's guest content with its grants, only when it has any: the guest
    fingerprints of VMs without one stay what they were before brokering existed."""
    if not grants:
        return content
    return content | {"brokered": [g.as_data() for g in grants]}
