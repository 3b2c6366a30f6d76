"""Where the host's credentials may be sent: ``pins.yaml`` in ``sand sync``'s host dir.

A manifest read out of a repository is written by whoever can commit. It names each
backend's address, and the host presents its own credentials there: the Proxmox API
token to the ``host:``/``port:`` it names, its SSH keys to a remote Lima host, a mapped
secret to a repository it clones. So the host, not the repository, says where each
may go::

    backends:
      pve:                              # the backend's name in the manifest
        host: pve.example.org
        port: 8006                      # default 8006
        egress_proxy: 10.20.0.1:3128    # where sand's egress proxy may listen; default none
        ca_file: .sand/pve-root-ca.pem  # default: none (the system's CA store)
        verify_tls: true                # default true
      build:
        ssh: {host: build-box.lan, port: 22, user: dev, known_hosts: .sand/known_hosts}
    tokens:                             # a mapped secret a repository is cloned with
      GITHUB_TOKEN: [https://github.com/acme/]

A backend of the manifest that uses the host's credentials (every Proxmox backend, a
Lima backend with ``ssh:``) and is pinned otherwise, or not at all, is refused at its
place in the revision, before any request; so is a repository whose ``token`` may not
be sent to its URL. A Lima backend on the sync host itself sends nothing anywhere.
"""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, ValidationError, model_validator

from sand.manifest.backends import LimaConfig, ProxmoxConfig, SshTarget
from sand.manifest.egress import EgressProxyEndpoint
from sand.manifest.fields import (
    EnvName,
    HostName,
    LocalPath,
    PortNumber,
    SshUser,
    Strict,
    empty_dict,
)
from sand.manifest.hostfiles import host_file_error, read_host_file
from sand.manifest.hosts import host as host_key
from sand.manifest.loader import LoadedManifest, validation_problems
from sand.manifest.yamlmarks import Path as DataPath

PINS = "pins.yaml"


class SshPin(Strict):
    host: HostName
    port: PortNumber = 22
    user: SshUser | None = None
    known_hosts: LocalPath | None = None


class BackendPin(Strict):
    """A Proxmox backend's API address and CA, or (``ssh:``) a remote Lima host's."""

    host: HostName | None = None
    port: PortNumber = 8006
    ca_file: LocalPath | None = None
    verify_tls: bool = True
    # Where the manifest may have this host listen as its guests' egress proxy: an
    # address the host's owner chose, never the repository's author.
    egress_proxy: EgressProxyEndpoint | None = None
    ssh: SshPin | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> BackendPin:
        if (self.host is None) == (self.ssh is None):
            raise ValueError("pin exactly one of 'host' (Proxmox) or 'ssh' (a remote Lima host)")
        return self


class Pins(Strict):
    backends: dict[str, BackendPin] = Field(default_factory=empty_dict)
    tokens: dict[EnvName, list[str]] = Field(default_factory=empty_dict)


def pins_file(directory: Path) -> Path:
    return directory / PINS


def load_pins(directory: Path) -> Pins:
    """The host's ``pins.yaml`` in ``directory``; a missing file pins nothing (and so
    lets no host credential go anywhere)."""
    file = pins_file(directory)
    marked = read_host_file(file, directory, "a mapping with 'backends' and 'tokens' keys")
    if marked is None:
        return Pins()
    try:
        return Pins.model_validate(marked.data)
    except ValidationError as exc:
        raise host_file_error(validation_problems(exc, marked, str(file)), file) from None


Finding = tuple[DataPath, str]


def pin_findings(loaded: LoadedManifest, host_dir: Path) -> list[Finding]:
    """Each place where the manifest sends a host credential somewhere ``pins.yaml``
    does not allow, with why."""
    pins, file = load_pins(host_dir), pins_file(host_dir)
    found: list[Finding] = []
    for name, config in loaded.manifest.backends.items():
        at: DataPath = ("backends", name)
        pin = pins.backends.get(name)
        if isinstance(config, ProxmoxConfig):
            said = {
                "host": host_key(config.host).spelling,
                "port": config.port,
                "ca_file": _path(config.ca_file),
                "verify_tls": config.verify_tls,
                "egress_proxy": config.egress_proxy,
            }
            if pin is None or pin.host is None:
                found.append((at, _unpinned(name, "its API token", file)))
                continue
            pinned = {
                "host": host_key(pin.host).spelling,
                "port": pin.port,
                "ca_file": _path(pin.ca_file),
                "verify_tls": pin.verify_tls,
                "egress_proxy": pin.egress_proxy,
            }
            found += _differ(at, name, said, pinned, file)
        elif isinstance(config, LimaConfig) and config.ssh is not None:
            at = (*at, "ssh")
            if pin is None or pin.ssh is None:
                found.append((at, _unpinned(name, "its SSH keys and the guests' secrets", file)))
                continue
            found += _differ(at, name, _ssh(config.ssh), _ssh(pin.ssh), file)
    for name, repo in loaded.manifest.repos.items():
        if repo.token is None:
            continue
        allowed = pins.tokens.get(repo.token)
        if allowed is None:
            found.append(
                (
                    ("repos", name, "token"),
                    f"the host does not say where its secret {repo.token} may be sent; list "
                    f"the repositories in {file} (tokens: {{{repo.token}: [URL, ...]}})",
                )
            )
        elif not any(url_within(repo.url, prefix) for prefix in allowed):
            found.append(
                (
                    ("repos", name, "url"),
                    f"{file} allows the secret {repo.token} to be sent only to "
                    f"{', '.join(allowed)}; this repository is elsewhere",
                )
            )
    return found


def _unpinned(name: str, what: str, file: Path) -> str:
    return (
        f"backend {name} would be sent the host's {what}, and {file} does not pin its "
        f"address; pin it there (backends: {{{name}: ...}}) on the host"
    )


def _differ(
    at: DataPath, name: str, said: dict[str, object], pinned: dict[str, object], file: Path
) -> list[Finding]:
    return [
        (
            (*at, key),
            f"{_shown(value)} is not {_what(key, name)}: {file} pins {key} {_shown(pinned[key])}",
        )
        for key, value in said.items()
        if value != pinned[key]
    ]


def _what(key: str, name: str) -> str:
    if key == "egress_proxy":  # the host listens there: its owner says where, if at all
        return f"where the host lets backend {name}'s guests reach its egress proxy"
    return f"where the host sends backend {name}'s credentials"


def _shown(value: object) -> str:
    return "(none)" if value is None else str(value)


def _ssh(target: SshTarget | SshPin) -> dict[str, object]:
    return {
        "host": host_key(target.host).spelling,
        "port": target.port,
        # No user: the SSH connection logs in as the user running sand.
        "user": target.user or getpass.getuser(),
        "known_hosts": _path(target.known_hosts),
    }


def _path(value: str | None) -> str | None:
    return os.path.normpath(value) if value else None


def url_within(url: str, prefix: str) -> bool:
    """Whether ``url`` lies under ``prefix``: the same scheme, user, host and port, and
    a path that starts with the prefix's at a ``/`` (``/acme`` holds ``/acme/x``, never
    ``/acme-evil``)."""
    a, b = _parts(url), _parts(prefix)
    if a is None or b is None or a[:4] != b[:4]:
        return False
    base = b[4].rstrip("/")
    return a[4] == base or a[4].startswith(base + "/")


_DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}


def _parts(url: str) -> tuple[str, str | None, str | None, int | None, str] | None:
    if "://" not in url and ":" in url:  # git's user@host:path, as ssh://user@host/path
        login, _, path = url.partition(":")
        url = f"ssh://{login}/{path.lstrip('/')}"
    try:
        u = urlsplit(url)
        scheme = u.scheme.lower()
        return scheme, u.username, u.hostname, u.port or _DEFAULT_PORTS.get(scheme), u.path
    except ValueError:
        return None
