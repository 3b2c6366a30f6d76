"""What a guest spec must be before anything is run on a guest: the user name, paths
inside the home, repository URLs; each refused with :class:`ProvisionSpecError`.

The manifest refuses the same at validate time; these are the same rules again for
specs that reach provisioning another way."""

from __future__ import annotations

import hashlib
import re
from urllib.parse import urlsplit

from sand.errors import ErrorLayer, SandError
from sand.manifest.values import home_path_problem, normalise_home_path, repo_url_problem

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
