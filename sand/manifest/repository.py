"""What a manifest read out of a repository may not say (``sand sync``).

Whoever can commit to the branch writes it, and ``sand sync`` applies it on its
host as its user. So it names secrets and says where in which guest they go, but
never where a value comes from: a ``command:`` would run on the sync host, a
``file:`` would ship a host file (the git token, the Proxmox token, ``~/.ssh``)
into a guest the committer controls, an ``env:`` would read the sync's
environment. Each such source is a located problem; the host maps the names to
sources in its own ``secrets.yaml`` (:mod:`sand.manifest.hostsecrets`).
"""

from __future__ import annotations

from pathlib import Path

from sand.errors import Problem
from sand.manifest.hostsecrets import host_secrets_file
from sand.manifest.loader import LoadedManifest
from sand.manifest.models import SecretSource


def repository_problems(loaded: LoadedManifest, host_dir: Path) -> list[Problem]:
    """Every secret source the repository's manifest sets, each at its place."""
    problems = []
    mapping = host_secrets_file(host_dir)
    for name, secret in loaded.manifest.secrets.items():
        source = secret.source
        if source is None:
            continue
        kind, why = _why(source, host_dir)
        line, column = 1, 1
        if loaded.marks is not None:
            mark = loaded.marks.mark_for(("secrets", name, "from", kind), key=True)
            line, column = mark.line, mark.column
        message = (
            f"secrets.{name}.from.{kind}: {why}. A manifest sand sync follows names its "
            f"secrets only ({name}: {{}}); map {name} to a source in {mapping}"
        )
        problems.append(Problem(str(loaded.path), line, column, message))
    return problems


def _why(source: SecretSource, host_dir: Path) -> tuple[str, str]:
    if source.command is not None:
        return "command", "a command would run on the sync host, as its user"
    if source.env is not None:
        return "env", "it would read the environment of the sync's own process"
    assert source.file is not None  # exactly one source
    path = source.file
    if path.startswith("~") or Path(path).is_absolute():
        return "file", f"{path} is a host file outside --host-dir ({host_dir})"
    # Symbolic links are followed: a link in the host dir may point anywhere.
    if not (host_dir / path).resolve().is_relative_to(host_dir.resolve()):
        return "file", f"{path} leads out of --host-dir ({host_dir})"
    return "file", (
        f"{path} is a file of the host's, which also holds the host's own credentials "
        "(its git and Proxmox tokens, its keys)"
    )
