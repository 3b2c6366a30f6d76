"""The host's map of secret names to sources (``secrets.yaml`` in the host dir): what
a manifest that only names a secret resolves through, and the only source a
manifest from a repository has."""

from __future__ import annotations

import pytest

from sand.errors import ManifestError, SecretError
from sand.secrets import resolve_secrets
from tests.provision.helpers import manifest

CANARY = "canary-host-map-4f1a0c"


def test_a_secret_the_manifest_only_names_comes_from_the_hosts_map(tmp_path):
    (tmp_path / "api.token").write_text(CANARY + "\n")
    (tmp_path / "api.token").chmod(0o600)
    (tmp_path / "secrets.yaml").write_text("secrets:\n  API:\n    from: {file: api.token}\n")
    values = resolve_secrets(manifest("  API: {}\n"), tmp_path, ["API"])
    assert values["API"].reveal() == CANARY


def test_a_repository_manifests_own_source_is_never_used(tmp_path):
    # The second lock behind sand sync's refusal: the command is not run, the map is read.
    marker = tmp_path / "ran"
    (tmp_path / "secrets.yaml").write_text(
        f"secrets:\n  API:\n    from: {{command: [echo, {CANARY}]}}\n"
    )
    m = manifest(f"  API:\n    from: {{command: [touch, {marker}]}}\n")
    values = resolve_secrets(m, tmp_path, ["API"], from_repository=True)
    assert values["API"].reveal() == CANARY and not marker.exists()


def test_a_name_the_host_does_not_map_is_said_with_the_file_to_map_it_in(tmp_path):
    with pytest.raises(SecretError) as err:
        resolve_secrets(manifest("  API: {}\n"), tmp_path, ["API"])
    assert "'API' has no source" in str(err.value)
    assert str(tmp_path / "secrets.yaml") in str(err.value)


def test_a_broken_map_is_refused_at_its_line_and_column(tmp_path):
    (tmp_path / "secrets.yaml").write_text("secrets:\n  API:\n    from: {flie: api.token}\n")
    with pytest.raises(ManifestError) as err:
        resolve_secrets(manifest("  API: {}\n"), tmp_path, ["API"])
    assert f"{tmp_path / 'secrets.yaml'}:3:12: unknown key 'flie'" in str(err.value)
    assert "did you mean 'file'?" in str(err.value)


def test_a_map_others_may_write_is_refused(tmp_path):
    # Whoever can write it chooses the commands sand runs.
    path = tmp_path / "secrets.yaml"
    path.write_text(f"secrets:\n  API:\n    from: {{command: [echo, {CANARY}]}}\n")
    path.chmod(0o664)
    with pytest.raises(ManifestError, match="writable by group or others"):
        resolve_secrets(manifest("  API: {}\n"), tmp_path, ["API"])


def test_a_mapped_source_that_fails_is_told_at_its_place_in_the_map(tmp_path):
    # The map is the host's file: a source of it that fails points there, not nowhere.
    (tmp_path / "secrets.yaml").write_text(
        "secrets:\n"
        "  API:\n"
        "    from: {file: missing.token}\n"
        "  NPM:\n"
        "    from:\n"
        '      command: ["false"]\n'
    )
    with pytest.raises(SecretError) as err:
        resolve_secrets(manifest("  API: {}\n  NPM: {}\n"), tmp_path, ["API", "NPM"])
    told = str(err.value).splitlines()
    where = tmp_path / "secrets.yaml"
    assert told[0].startswith(f"{where}:3:18: secret 'API': cannot read "), told
    assert told[1].startswith(f"{where}:6:16: secret 'NPM': command 'false' failed"), told
