"""The host's own files (``secrets.yaml``, ``pins.yaml``) are read only when nobody
else could have written them, as sshd reads ``authorized_keys`` (``StrictModes``).

Whoever can write ``secrets.yaml`` chooses the commands sand runs as the sync's user
(here root). Each case below makes real files with real owners and modes, the map's
``command:`` writing a marker on the host: the marker must never appear, fakepve must
get no request, and the refusal must name the path and the fix."""

from __future__ import annotations

import os
import pwd
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import Sand
from tests.cli.sync_rig import Repo, https_git, private_file
from tests.cli.test_sync import GIT_TOKEN, names, vm_manifest
from tests.rig.gitserver import GitServer

NOBODY = pwd.getpwnam("nobody").pw_uid


@pytest.fixture
def git(fakepve_rig_pki, monkeypatch) -> Iterator[GitServer]:
    with https_git(GIT_TOKEN, fakepve_rig_pki, monkeypatch) as server:
        yield server


def _owned_by_nobody(host: Path, file: Path) -> tuple[Path, str]:
    os.chown(file, NOBODY, -1)
    return file, f"fix: chown root {file}"


def _open_file(host: Path, file: Path) -> tuple[Path, str]:
    file.chmod(0o666)
    return file, f"fix: chmod go-w {file}"


def _open_host_dir(host: Path, file: Path) -> tuple[Path, str]:
    host.chmod(0o775)
    return (
        host,
        f"is writable by group or others (mode 0775), so they choose what sand does; "
        f"fix: chmod go-w {host}",
    )


def _link_into_a_dir_of_nobody(host: Path, file: Path) -> tuple[Path, str]:
    # The file really lies where its link leads: that directory is checked too.
    sub = host / "conf"
    sub.mkdir()
    file.rename(sub / file.name)
    file.symlink_to(sub / file.name)
    os.chown(sub, NOBODY, -1)
    return sub, f"fix: chown root {sub}"


CASES: dict[str, Callable[[Path, Path], tuple[Path, str]]] = {
    "file of nobody": _owned_by_nobody,
    "file 0666": _open_file,
    "host dir 0775": _open_host_dir,
    "link into a dir of nobody": _link_into_a_dir_of_nobody,
}


@pytest.mark.parametrize("name", ["secrets.yaml", "pins.yaml"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_host_file_others_could_write_is_not_read(
    tmp_path, fakepve_server, git, case: str, name: str
) -> None:
    rig = fakepve_server
    host = rig.workdir
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    marker = tmp_path / "ran-as-root"
    if name == "secrets.yaml":  # its command would run as root
        command = f"secrets:\n  API:\n    from: {{command: [touch, {marker}]}}\n"
        (host / name).write_text(command)
    file = host / name
    path, fix = CASES[case](host, file)
    token = private_file(tmp_path / "git.token", GIT_TOKEN)
    args = ("--repo", repo.url, "--token-file", str(token), "--host-dir", str(host))
    rig.clear_log()
    done = Sand(tmp_path).run("sync", "--once", *args)
    assert done.returncode == 1
    assert f"{file}:1:1: not read: {path} " in done.stderr, done.stderr
    assert fix in done.stderr and "Traceback" not in done.stderr
    assert not marker.exists() and names(rig) == [] and rig.log == []


def test_a_map_of_another_user_beside_a_manifest_runs_no_command(tmp_path, fakepve_server) -> None:
    # A plain apply reads the secrets.yaml beside its manifest by the same rule.
    import yaml

    rig = fakepve_server
    marker = tmp_path / "ran-as-root"
    data = rig.manifest(
        [{"name": "s-1", "provision": True, "secrets": [{"name": "API", "scope": "~"}]}]
    )
    data["secrets"] = {"API": {}}
    manifest = rig.workdir / "sand.yaml"
    manifest.write_text(yaml.safe_dump(data))
    secrets = rig.workdir / "secrets.yaml"
    secrets.write_text(f"secrets:\n  API:\n    from: {{command: [touch, {marker}]}}\n")
    os.chown(secrets, NOBODY, -1)
    done = Sand(tmp_path).run("apply", str(manifest), "--auto-approve")
    assert done.returncode == 1
    assert f"{secrets} belongs to nobody, not to root, so they choose" in done.stderr
    assert f"fix: chown root {secrets}" in done.stderr
    # The host's file is at fault, not the manifest: the last line says which.
    assert "the manifest is invalid" not in done.stderr
    assert done.stderr.rstrip().endswith(
        f"Error: the host's secrets.yaml is not used (1 problem): fix {secrets}."
    )
    assert not marker.exists()
