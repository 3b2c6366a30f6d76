"""The host's own map of secret names to sources: ``secrets.yaml`` in the host dir.

A manifest read out of a repository (``sand sync``) is written by whoever can
commit, so it may only *name* secrets: where a value comes from (a file, an
environment variable, a command) is the host's word, kept in this file beside the
host's other files (``--host-dir``; for a plain ``sand apply``, beside the
manifest). Its shape is the manifest's own ``secrets:`` section, so a section can
move here verbatim::

    secrets:
      GITHUB_TOKEN:
        from: {file: github.token}        # relative to this file's directory
      NPM_TOKEN:
        from: {command: [pass, show, npm]}

A missing file maps nothing. It is read only when nobody else could have written it
(:mod:`sand.manifest.hostfiles`). Errors are located (``FILE:LINE:COL``), as a
manifest's, and so is a source that fails when its value is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import Field, ValidationError

from sand.manifest.content import SecretSource
from sand.manifest.fields import EnvName, Strict, empty_dict
from sand.manifest.hostfiles import host_file_error, read_host_file
from sand.manifest.loader import validation_problems

HOST_SECRETS = "secrets.yaml"


class HostSecret(Strict):
    source: SecretSource = Field(alias="from", description="Exactly one of file, env or command.")


class HostSecrets(Strict):
    secrets: dict[EnvName, HostSecret] = Field(default_factory=empty_dict)


@dataclass(frozen=True)
class HostMap:
    """The host's sources, and where in ``secrets.yaml`` each is written
    (``FILE:LINE:COL``), so a source that fails is told at its line."""

    sources: dict[str, SecretSource] = field(default_factory=dict)
    places: dict[str, str] = field(default_factory=dict)


def host_secrets_file(directory: Path) -> Path:
    return directory / HOST_SECRETS


def load_host_map(directory: Path) -> HostMap:
    """The host's ``secrets.yaml`` in ``directory``, with the place of each source."""
    file = host_secrets_file(directory)
    marked = read_host_file(file, directory, "a mapping with a 'secrets' key")
    if marked is None:
        return HostMap()
    try:
        parsed = HostSecrets.model_validate(marked.data)
    except ValidationError as exc:
        raise host_file_error(validation_problems(exc, marked, str(file)), file) from None
    places = {}
    for name, secret in parsed.secrets.items():
        source = secret.source
        kind = "file" if source.file else "env" if source.env else "command"
        mark = marked.mark_for(("secrets", name, "from", kind))
        places[name] = f"{file}:{mark.line}:{mark.column}"
    return HostMap({name: s.source for name, s in parsed.secrets.items()}, places)


def load_host_secrets(directory: Path) -> dict[str, SecretSource]:
    """Secret name -> its source, as the host's ``secrets.yaml`` in ``directory`` says."""
    return load_host_map(directory).sources
