"""What a guest spec must be before anything is run on a guest: the user name, paths
inside the home, repository URLs, agents, packages, the clock and language; each
refused with :class:`ProvisionSpecError`.

The manifest refuses the same at validate time; these are the same rules again for
specs that reach provisioning another way."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, get_args
from urllib.parse import urlsplit

from sand.errors import ErrorLayer, SandError
from sand.manifest.fields import Agent
from sand.manifest.locales import locale_problem, timezone_problem
from sand.manifest.values import (
    home_path_problem,
    normalise_home_path,
    package_problem,
    repo_url_problem,
)

if TYPE_CHECKING:
    from sand.desired.spec import DesiredVM

# The manifest's closed set, again for specs that reach provisioning another way.
AGENTS: tuple[str, ...] = get_args(Agent)

_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


_CONTEXT = re.compile(r"^https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?$")


class ProvisionSpecError(SandError):
    """A VM's guest spec cannot be provisioned as written (checked before any SSH)."""

    layer = ErrorLayer.PROVISION


def check_user(user: str) -> str:
    if not _USER.match(user):
        raise ProvisionSpecError(f"user {user!r} is not a valid Linux user name")
    return user


def guest_path(path: str, what: str) -> str:
    """A normalised '~' or '~/…' path made only of safe segments.

    The manifest refuses anything else at validate time; this is the same rule
    again for specs that reach provisioning another way. The guest script
    checks once more that the resolved path is inside the user's home.
    """
    problem = home_path_problem(path)
    if problem:
        raise ProvisionSpecError(f"{what}: {problem}")
    return normalise_home_path(path)


def slug(path: str) -> str:
    """A file name for a guest path: readable, and unique by a hash of the path."""
    tail = re.sub(r"[^A-Za-z0-9._-]+", "-", path.removeprefix("~/").strip("/~")) or "home"
    return f"{tail[-40:].strip('-.') or 'p'}-{hashlib.sha256(path.encode()).hexdigest()[:10]}"


def credential_context(url: str, repo: str) -> str:
    """scheme://host[:port] of an HTTP(S) clone URL, refusing embedded credentials."""
    parts = urlsplit(url)
    if parts.password is not None or parts.username is not None:
        raise ProvisionSpecError(
            f"repo {repo!r}: the URL carries credentials; put the token in a secret and name "
            "it in the repo's 'token'"
        )
    context = f"{parts.scheme}://{parts.netloc}"
    if not _CONTEXT.match(context):
        raise ProvisionSpecError(
            f"repo {repo!r}: a token is only used over http(s); {url!r} is not an http(s) URL"
        )
    return context


def check_url(url: str, repo: str) -> str:
    problem = repo_url_problem(url)
    if problem:
        # The problem never quotes a URL that carries credentials.
        raise ProvisionSpecError(f"repo {repo!r}: {problem}")
    return url


def check_timezone_and_locale(vm: DesiredVM) -> tuple[str, str]:
    """The VM's timezone and locale, by the manifest's rules (names fit for argv)."""
    problem = timezone_problem(vm.timezone) or locale_problem(vm.locale)
    if problem:
        raise ProvisionSpecError(problem)
    return vm.timezone, vm.locale


def checked_agents(agents: Sequence[str]) -> list[str]:
    wanted = sorted(set(agents))
    unknown = [a for a in wanted if a not in AGENTS]
    if unknown:
        raise ProvisionSpecError(f"unknown agents: {', '.join(unknown)}")
    return wanted


def checked_packages(packages: Sequence[str]) -> list[str]:
    bad = [p for p in packages if package_problem(p)]
    if bad:
        raise ProvisionSpecError(f"not Debian package names: {', '.join(bad)}")
    return sorted(set(packages))
