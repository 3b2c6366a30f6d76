"""What a manifest read out of a repository may not say (``sand sync``).

Whoever can commit to the branch writes it, and ``sand sync`` applies it on its
host as its user. So it names secrets and says where in which guest they go, but
never where a value comes from: a ``command:`` would run on the sync host, a
``file:`` would ship a host file (the git token, the Proxmox token, ``~/.ssh``)
into a guest the committer controls, an ``env:`` would read the sync's
environment. Each such source is a located problem; the host maps the names to
sources in its own ``secrets.yaml`` (:mod:`sand.manifest.hostsecrets`). So is a
backend's host file outside the host dir (a token file is presented to whichever
Proxmox host the manifest names: it must not be ``~/.ssh/id_ed25519``), a
``limactl`` other than the one on the sync's PATH, and a backend address or a
repository a host credential would be sent to that the host's ``pins.yaml`` does not
allow (:mod:`sand.manifest.pins`).
"""

from __future__ import annotations

from pathlib import Path

from sand.errors import Problem
from sand.manifest.content import SecretSource
from sand.manifest.hostsecrets import host_secrets_file
from sand.manifest.loader import LoadedManifest
from sand.manifest.pins import pin_findings

# A backend's host files, by where they sit in its config: read on the sync host, and
# a token file is presented to whichever host the manifest names.
BACKEND_FILES = ("token_file", "ca_file", "identity", "lima_home")
SSH_FILES = ("identity", "known_hosts")
DEFAULT_LIMACTL = "limactl"


def repository_problems(loaded: LoadedManifest, host_dir: Path) -> list[Problem]:
    """Every secret source the repository's manifest sets, and every host path it
    names outside ``host_dir``, each at its place."""

    def at(path: tuple[str | int, ...], message: str) -> Problem:
        line, column = 1, 1
        if loaded.marks is not None:
            mark = loaded.marks.mark_for(path, key=True)
            line, column = mark.line, mark.column
        return Problem(str(loaded.path), line, column, f"{'.'.join(map(str, path))}: {message}")

    problems = []
    mapping = host_secrets_file(host_dir)
    for name, secret in loaded.manifest.secrets.items():
        if secret.source is not None:
            kind, why = _why(secret.source, host_dir)
            problems.append(
                at(
                    ("secrets", name, "from", kind),
                    f"{why}. A manifest sand sync follows names its secrets only "
                    f"({name}: {{}}); map {name} to a source in {mapping}",
                )
            )
    for name, config in loaded.manifest.backends.items():
        ssh = getattr(config, "ssh", None)
        files: list[tuple[tuple[str, ...], object]] = [
            (("backends", name, f), getattr(config, f, None)) for f in BACKEND_FILES
        ]
        files += [(("backends", name, "ssh", f), getattr(ssh, f, None)) for f in SSH_FILES]
        for path, value in files:
            outside = _outside(str(value), host_dir) if value else None
            if outside:
                problems.append(at(path, f"{outside}; name a file in it by a relative path"))
        if getattr(config, "limactl", DEFAULT_LIMACTL) != DEFAULT_LIMACTL:
            problems.append(
                at(
                    ("backends", name, "limactl"),
                    "a manifest sand sync follows does not choose the program run on the sync "
                    "host; put limactl on the sync's PATH",
                )
            )
    problems += [at(path, message) for path, message in pin_findings(loaded, host_dir)]
    return problems


def _outside(path: str, host_dir: Path) -> str | None:
    """Why ``path`` is not a file in ``host_dir``, or None."""
    if path.startswith("~") or Path(path).is_absolute():
        return f"{path} is a host file outside --host-dir ({host_dir})"
    # Symbolic links are followed: a link in the host dir may point anywhere.
    if not (host_dir / path).resolve().is_relative_to(host_dir.resolve()):
        return f"{path} leads out of --host-dir ({host_dir})"
    return None


def _why(source: SecretSource, host_dir: Path) -> tuple[str, str]:
    if source.command is not None:
        return "command", "a command would run on the sync host, as its user"
    if source.env is not None:
        return "env", "it would read the environment of the sync's own process"
    assert source.file is not None  # exactly one source
    return "file", _outside(source.file, host_dir) or (
        f"{source.file} is a file of the host's, which also holds the host's own credentials "
        "(its git and Proxmox tokens, its keys)"
    )
