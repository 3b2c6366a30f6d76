"""Keyed digests detect rotation; the key and the store are private files."""

from __future__ import annotations

import json
import stat

import pytest

from sand.errors import StateError
from sand.secrets import DigestStore, SecretValue, digest_key, secrets_digest
from tests.provision.helpers import make_vm, repo, secret

CANARY = "canary-digest-61c0ffee"


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


def _mode(path):
    return stat.S_IMODE(path.stat().st_mode)


VM = make_vm(
    secrets=(secret("API", "~/work", "API_KEY"),),
    repos=(repo("app", "https://git.test/app.git", "~/src/app", token="GIT"),),
)


def test_digest_changes_with_any_value_scope_or_env_name_and_not_otherwise():
    key = digest_key()
    values = {"API": CANARY, "GIT": "git-token-1"}
    base = secrets_digest(VM, values, key)
    assert base == secrets_digest(VM, {k: SecretValue(k, v) for k, v in values.items()}, key)
    assert base != secrets_digest(VM, {**values, "API": CANARY + "x"}, key)
    assert base != secrets_digest(VM, {**values, "GIT": "git-token-2"}, key)
    moved = make_vm(secrets=(secret("API", "~/elsewhere", "API_KEY"),), repos=VM.repos)
    assert base != secrets_digest(moved, values, key)
    renamed = make_vm(secrets=(secret("API", "~/work", "OTHER"),), repos=VM.repos)
    assert base != secrets_digest(renamed, values, key)
    assert CANARY not in base


def test_digest_is_keyed():
    values = {"API": CANARY, "GIT": "git-token-1"}
    assert secrets_digest(VM, values, b"k" * 32) != secrets_digest(VM, values, b"j" * 32)


def test_key_is_created_once_private_and_reused(state_dir):
    key = digest_key()
    assert len(key) == 32
    path = state_dir / "secrets-digest.key"
    assert _mode(path) == 0o600
    assert digest_key() == key


def test_store_records_per_vm_in_a_private_file(state_dir):
    store = DigestStore("demo")
    assert store.get("vm1") is None
    store.record("vm1", "hmac-sha256:aa")
    store.record("vm2", "hmac-sha256:bb")
    assert DigestStore("demo").get("vm1") == "hmac-sha256:aa"
    assert DigestStore("other").get("vm1") is None
    assert _mode(store.path) == 0o600
    assert _mode(store.path.parent) == 0o700
    store.forget("vm1")
    assert DigestStore("demo").all() == {"vm2": "hmac-sha256:bb"}


def test_corrupt_store_is_quarantined_not_overwritten(state_dir):
    store = DigestStore("demo")
    store.path.write_text("{not json")
    assert store.get("vm1") is None
    assert list(store.path.parent.glob("secret-digests.json.corrupt-*"))


def test_newer_store_version_is_refused(state_dir):
    store = DigestStore("demo")
    store.path.write_text(json.dumps({"version": 99, "digests": {}}))
    with pytest.raises(StateError, match="newer sand"):
        store.get("vm1")
