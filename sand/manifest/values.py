"""Rules for the manifest's free-form values, refusing hostile input by name.

A manifest is applied from CI and shared between people, so each value that
ends up in an argv, a URL, a path or a REST path is checked here at validate
time (each function returns why a value is refused, or None), and the same
functions are called again where the value is used (provisioning steps,
backends) so no other way in can pass one through. The rules are the
narrowest that still admit every legitimate manifest: an option smuggled in
as a value (a leading ``-``), git's ``ext::`` command transport, credentials
written into a URL or host, a path that leaves the login user's home.

Only the standard library's light modules are imported: ``sand validate``
stays fast.
"""

from __future__ import annotations

import ipaddress
import re
from urllib.parse import urlsplit

# --- shared pieces ------------------------------------------------------------------

_DNS_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
# A percent-encoded control character: git decodes these in ssh and file paths.
_ENCODED_CONTROL = re.compile(r"%(0[0-9A-Fa-f]|1[0-9A-Fa-f]|7[Ff])")


def control_problem(value: str) -> str | None:
    """Control characters (newline, NUL, ESC, DEL, C1) are never legitimate here."""
    for ch in value:
        if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0:
            return f"contains a control character ({ch!r})"
    if not value.isprintable():
        return "contains an invisible character"
    return None


def image_problem(image: str) -> str | None:
    """Control characters, or one of sand's own spellings that name no image: the plan
    shows a VM claiming a pool's spare as made from ``pool:NAME`` and a fork as made
    from ``fork:VM``, but a manifest declares those with keys of their own. Refused
    here, at the line, instead of at the plan."""
    problem = control_problem(image)
    if problem:
        return problem
    kind, colon, name = image.partition(":")
    if colon and kind == "pool":
        return (
            f"{image!r} is not an image: a VM takes a spare of a pool with `pool: {name}` "
            "(and no image)"
        )
    if colon and kind == "fork":
        return (
            f"{image!r} is not an image: a fork is declared with `from: {{vm: {name}}}` "
            "(and no image)"
        )
    return None


def hostname_problem(host: str, what: str = "host") -> str | None:
    """A DNS name, an IPv4 or an IPv6 address (bare, or in brackets); nothing else."""
    if not host:
        return f"the {what} is empty"
    if host.startswith("-"):
        return f"the {what} starts with '-' (it would read as an option)"
    problem = control_problem(host)
    if problem:
        return f"the {what} {problem}"
    if "@" in host:
        return (
            f"the {what} holds a user or credentials ('@'): write only the host name "
            "(credentials never belong in the manifest)"
        )
    if "://" in host:
        return f"write only the {what} name: no scheme ('https://') and no path"
    if "/" in host or "?" in host or "#" in host:
        return f"write only the {what} name: no path"
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(bare)
        return None
    except ValueError:
        pass
    if bare != host or ":" in host:
        return f"{host!r} is not a host name or IP address (the port goes in 'port')"
    name = host[:-1] if host.endswith(".") else host
    if len(name) > 253 or not all(_DNS_LABEL.match(label) for label in name.split(".")):
        return f"{host!r} is not a host name or IP address"
    return None


def local_path_problem(path: str) -> str | None:
    """A path on this machine: anything printable (it is the user's own disk)."""
    if not path:
        return "the path is empty"
    return control_problem(path)


def executable_problem(path: str) -> str | None:
    if path.startswith("-"):
        return "starts with '-' (it would read as an option)"
    return local_path_problem(path)


# --- SSH users ------------------------------------------------------------------------

SSH_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def ssh_user_problem(user: str) -> str | None:
    if user.startswith("-"):
        return "the user starts with '-' (it would read as an ssh option)"
    if not SSH_USER.match(user):
        return (
            f"{user!r} is not a user name: letters, digits and '_.-' (no '@', ':' or credentials)"
        )
    return None


# --- guest paths under the login user's home -------------------------------------------

# Guest paths go into .envrc, gitconfig and includeIf patterns: keep them to
# characters none of those quote or expand.
_HOME_SEGMENT = re.compile(r"^[A-Za-z0-9_+@=,.][A-Za-z0-9._+@=,-]*$")
MAX_GUEST_PATH = 1024


def home_path_problem(path: str) -> str | None:
    """Why ``path`` is not ``~`` or a clean path under ``~/``, or None."""
    problem = control_problem(path)
    if problem:
        return problem
    if path == "~":
        return None
    if not path.startswith("~/"):
        return f"{path!r} is outside the login user's home: write it under ~/"
    if len(path) > MAX_GUEST_PATH:
        return f"longer than {MAX_GUEST_PATH} characters"
    segments = path[2:].rstrip("/").split("/")
    if any(s in (".", "..") for s in segments):
        return f"{path!r} has a '.' or '..' segment: write it under ~/ without them"
    if not path[2:].rstrip("/") or not all(_HOME_SEGMENT.match(s) for s in segments):
        return (
            f"{path!r}: use letters, digits and '._+@=,-' in each path segment "
            "(no spaces, quotes or empty segments, none starting with '-')"
        )
    return None


def normalise_home_path(path: str) -> str:
    """``~/src/`` → ``~/src`` (the path must already be valid)."""
    return path.rstrip("/") if len(path) > 1 else path


# --- repository URLs --------------------------------------------------------------------

_URL_SCHEMES = ("https", "http", "ssh", "git", "file")
# git's "<transport>::<address>" (remote-helper) syntax: ext:: runs a command.
_TRANSPORT = re.compile(r"^[A-Za-z0-9+.-]*::")
_SCP_LIKE = re.compile(r"^(?:(?P<user>[^@/:]+)@)?(?P<host>\[[^\]/]*\]|[^:/\[\]]+):(?P<path>.*)$")
ALLOWED_URLS = "https://, http://, ssh://, git://, file:// or user@host:path"


def repo_url_problem(url: str) -> str | None:
    """Why git must not be given ``url``, or None for a clean URL of an allowed form."""
    if not url:
        return "the URL is empty"
    if url.startswith("-"):
        return "the URL starts with '-' (git would read it as an option)"
    if _TRANSPORT.match(url):
        helper = url.split("::", 1)[0] or "<empty>"
        return (
            f"the URL uses git's '{helper}::' transport syntax, which can run commands; "
            f"write {ALLOWED_URLS}"
        )
    problem = control_problem(url)
    if problem:
        return f"the URL {problem}"
    if any(ch.isspace() for ch in url):
        return "the URL contains whitespace"
    if _ENCODED_CONTROL.search(url):
        return "the URL holds a percent-encoded control character"
    if "://" in url:
        return _url_problem(url)
    scp = _SCP_LIKE.match(url)
    if scp:
        return _scp_problem(scp)
    return f"{url!r} is not a repository URL git can be given safely; write {ALLOWED_URLS}"


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        return f"the URL cannot be read: {exc}"
    scheme = parts.scheme.lower()
    if scheme not in _URL_SCHEMES:
        return f"the URL scheme {parts.scheme + '://'!r} is not allowed; write {ALLOWED_URLS}"
    if parts.password is not None:
        return (
            "the URL carries a password: put the token in a secret and name it in the "
            "repo's 'token' (credentials never belong in the manifest)"
        )
    if parts.username is not None and scheme != "ssh":
        return (
            f"the URL carries credentials ('…@' in a {scheme} URL): put the token in a "
            "secret and name it in the repo's 'token'"
        )
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            return "write a local repository as file:///absolute/path"
        return None
    if parts.username is not None:
        user_problem = ssh_user_problem(parts.username)
        if user_problem:
            return f"in the URL, {user_problem}"
    host = parts.netloc.rpartition("@")[2]
    if port is not None:
        host = host.rsplit(":", 1)[0]
    elif host.endswith(":"):
        host = host[:-1]
    problem = hostname_problem(host)
    if problem:
        return f"in the URL, {problem}"
    return None


def _scp_problem(scp: re.Match[str]) -> str | None:
    user, host, path = scp.group("user"), scp.group("host"), scp.group("path")
    if user is not None:
        user_problem = ssh_user_problem(user)
        if user_problem:
            return f"in the URL, {user_problem}"
    if "@" in path.split("/", 1)[0]:
        return "the URL looks like user:password@host: credentials never belong in the manifest"
    problem = hostname_problem(host)
    if problem:
        return f"in the URL, {problem}"
    if not path or path.startswith("-"):
        return "the URL's path is empty or starts with '-'"
    return None


# --- Debian packages -------------------------------------------------------------------------

PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]*(:[a-z0-9]+)?(=[A-Za-z0-9.+~:-]+)?$")


def package_problem(name: str) -> str | None:
    if name.startswith("-"):
        return f"{name!r} starts with '-' (apt would read it as an option)"
    if not PACKAGE.match(name):
        return (
            f"{name!r} is not a Debian package name: lower-case letters, digits and '+.-', "
            "optionally ':arch' and '=version'"
        )
    return None


# --- Proxmox identifiers --------------------------------------------------------------------

VMID_RANGE = (100, 999_999_999)
PVE_NODE = _DNS_LABEL
PVE_STORAGE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]*[A-Za-z0-9]$")
_PVE_POOL_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*$")
PVE_POOL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*){0,2}$")
PVE_BRIDGE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$")


def pve_node_problem(node: str) -> str | None:
    if not PVE_NODE.match(node):
        return f"{node!r} is not a Proxmox node name (letters, digits and '-', a DNS label)"
    return None


def pve_storage_problem(storage: str) -> str | None:
    if not PVE_STORAGE.match(storage) or len(storage) > 64:
        return (
            f"{storage!r} is not a Proxmox storage id (a letter, then letters, digits and "
            "'-_.', ending in a letter or digit)"
        )
    return None


def pve_pool_problem(pool: str) -> str | None:
    segments = pool.split("/")
    if (
        len(pool) > 128
        or len(segments) > 3
        or not all(_PVE_POOL_SEGMENT.match(s) for s in segments)
    ):
        return (
            f"{pool!r} is not a Proxmox pool id (letters, digits and '-_.', up to three "
            "'/'-separated levels)"
        )
    return None


def pve_bridge_problem(bridge: str) -> str | None:
    if not PVE_BRIDGE.match(bridge):
        return f"{bridge!r} is not a network bridge name (letters, digits and '_.-', 15 at most)"
    return None


def vmid_problem(vmid: int) -> str | None:
    low, high = VMID_RANGE
    if not low <= vmid <= high:
        return f"vmid {vmid} is out of range: Proxmox vmids are {low} to {high}"
    return None


def template_problem(template: int | str) -> str | None:
    """A template's vmid (100..999999999) or its VM name (a DNS name)."""
    if isinstance(template, int):
        return vmid_problem(template)
    if template.lstrip("-").isdigit():
        return vmid_problem(int(template))
    labels = template.split(".")
    if len(template) > 253 or not all(_DNS_LABEL.match(label) for label in labels):
        return (
            f"{template!r} is neither a template's vmid nor a Proxmox VM name "
            "(letters, digits, '-' and '.')"
        )
    return None


# --- names of manifest entries -------------------------------------------------------------

_ENTRY_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")


def entry_name_problem(name: str, kind: str) -> str | None:
    """Backend and repo names: shown in plans, and a repo's name is its default path."""
    if not _ENTRY_NAME.match(name) or ".." in name:
        return (
            f"{kind} name {name!r}: start with a letter or digit, then letters, digits and "
            "'_.-' (at most 63 characters, no '..')"
        )
    return None
