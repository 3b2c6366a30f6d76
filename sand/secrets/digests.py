"""Keyed hashes of delivered secrets, so rotation is detected without storing values.

Host-side sand keeps no secret value after a run. To know whether a VM's
secrets changed since they were last delivered it keeps, per VM, an
HMAC-SHA256 over what was delivered, keyed with a random per-host key. A plain
hash would not do: a short or guessable token could be recovered from its
hash by trying candidates; without the key (0600 in the state dir) it cannot.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path

from sand.desired.spec import DesiredVM
from sand.errors import StateError
from sand.secrets.files import create_private_once, locked, write_private
from sand.secrets.resolve import SecretValue, reveal
from sand.state.paths import project_dir, state_root

KEY_FILE = "secrets-digest.key"
STORE_FILE = "secret-digests.json"
STORE_VERSION = 1


def digest_key() -> bytes:
    """This host's HMAC key (32 random bytes), created on first use."""
    path = state_root() / KEY_FILE
    key = create_private_once(path, secrets.token_bytes(32))
    if len(key) != 32:
        raise StateError(f"{path} is not a sand digest key; delete it to make a new one")
    return key


def secrets_digest(vm: DesiredVM, values: Mapping[str, str | SecretValue], key: bytes) -> str:
    """HMAC-SHA256 over the (env name, scope, value) triples this VM is given.

    Repo tokens count as triples too (``git:<repo>``, checkout path, token),
    so rotating a clone token is a change like any other. A VM with no
    secrets has the digest of an empty list, not "".
    """
    triples = sorted(
        [(s.env, s.scope, reveal(values[s.name])) for s in vm.secrets]
        + [
            (f"git:{r.name}", r.path, reveal(values[r.token_secret]))
            for r in vm.repos
            if r.token_secret
        ]
    )
    blob = json.dumps(triples, separators=(",", ":"), ensure_ascii=False).encode()
    return "hmac-sha256:" + hmac.new(key, blob, hashlib.sha256).hexdigest()


class DigestStore:
    """The last digest delivered to each VM of a project (0600 JSON)."""

    def __init__(self, project: str) -> None:
        self.project = project
        self.path: Path = project_dir(project) / STORE_FILE

    def get(self, vm: str) -> str | None:
        return self._load().get(vm)

    def all(self) -> dict[str, str]:
        return dict(self._load())

    def record(self, vm: str, digest: str) -> None:
        self._update(vm, digest)

    def forget(self, vm: str) -> None:
        self._update(vm, None)

    def _update(self, vm: str, digest: str | None) -> None:
        with locked(self.path):
            data = self._load()
            if digest is None:
                if data.pop(vm, None) is None:
                    return
            elif data.get(vm) == digest:
                return
            else:
                data[vm] = digest
            body = {"version": STORE_VERSION, "digests": dict(sorted(data.items()))}
            write_private(self.path, json.dumps(body, indent=2).encode() + b"\n")

    def _load(self) -> dict[str, str]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        try:
            body = json.loads(raw)
            version = body["version"]
            digests = body["digests"]
            if version == STORE_VERSION and _is_str_map(digests):
                return dict(digests)
        except (ValueError, KeyError, TypeError):
            version = None
        if isinstance(version, int) and version > STORE_VERSION:
            raise StateError(f"{self.path} was written by a newer sand (version {version})")
        # Corrupt: keep it for a human, start afresh (every VM then re-delivers once).
        os.replace(self.path, self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}"))
        return {}


def _is_str_map(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    )
