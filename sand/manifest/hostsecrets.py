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

A missing file maps nothing. Errors are located (``FILE:LINE:COL``), as a manifest's.
"""

from __future__ import annotations

import stat
from pathlib import Path

from pydantic import Field, ValidationError

from sand.errors import ManifestError, Problem
from sand.manifest.content import SecretSource
from sand.manifest.fields import EnvName, Strict
from sand.manifest.loader import MAX_BYTES, validation_problems
from sand.manifest.yamlmarks import load_marked

HOST_SECRETS = "secrets.yaml"


class HostSecret(Strict):
    source: SecretSource = Field(alias="from", description="Exactly one of file, env or command.")


class HostSecrets(Strict):
    secrets: dict[EnvName, HostSecret] = Field(default_factory=dict)


def host_secrets_file(directory: Path) -> Path:
    return directory / HOST_SECRETS


def load_host_secrets(directory: Path) -> dict[str, SecretSource]:
    """Secret name -> its source, as the host's ``secrets.yaml`` in ``directory`` says."""
    file = host_secrets_file(directory)
    where = str(file)
    try:
        info = file.stat()
        raw = file.read_bytes() if info.st_size <= MAX_BYTES else None
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ManifestError([Problem(where, 1, 1, f"cannot read: {exc.strerror}")]) from None
    if raw is None:
        raise ManifestError([Problem(where, 1, 1, "larger than 4 MiB")])
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        # Whoever can write it chooses the commands sand runs for a secret.
        raise ManifestError(
            [Problem(where, 1, 1, f"writable by group or others; chmod go-w {file}")]
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ManifestError([Problem(where, 1, 1, f"not UTF-8: {exc.reason}")]) from None
    marked, yaml_problems = load_marked(text)
    if yaml_problems:
        raise ManifestError(
            [Problem(where, p.mark.line, p.mark.column, p.message) for p in yaml_problems]
        )
    if marked.data is None:
        return {}
    if not isinstance(marked.data, dict):
        raise ManifestError([Problem(where, 1, 1, "must be a mapping with a 'secrets' key")])
    try:
        parsed = HostSecrets.model_validate(marked.data)
    except ValidationError as exc:
        raise ManifestError(validation_problems(exc, marked, where)) from None
    return {name: secret.source for name, secret in parsed.secrets.items()}
