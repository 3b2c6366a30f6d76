"""A commit to the branch ``sand sync`` follows names secrets, never their sources.

Whoever can commit writes the manifest that ``sand sync`` applies on its host. These
tests push hostile commits to the real git server and follow the real ``sand sync``:
a ``command:`` source must run nothing on the host, a ``file:`` source must ship no
host file (``~/.ssh``, an absolute path, a ``../`` or symlink way out of --host-dir,
nor the host's own Proxmox token inside it). Each is refused at its place in the
revision, nothing is applied, and the last good revision stays in force. What is
asserted is read on the far side: the host's files, fakepve's request log, the git
server's log."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.helpers import Sand
from tests.cli.sync_rig import Repo, SyncProcess, https_git, private_file, ticks_pass
from tests.cli.test_sync import GIT_TOKEN, mutations, names, start_sync, vm_manifest
from tests.fakepve_rig.rig import FakePveRig
from tests.rig.gitserver import GitServer

CANARY = "canary-host-file-7d3e91-never-shipped"


@pytest.fixture
def git(fakepve_rig_pki, monkeypatch) -> Iterator[GitServer]:
    with https_git(GIT_TOKEN, fakepve_rig_pki, monkeypatch) as server:
        yield server


def with_secret(rig: FakePveRig, source: dict[str, object]) -> str:
    """The manifest of a commit that gives VM s-1 a secret from ``source``."""
    data = vm_manifest(
        rig, [{"name": "s-1", "provision": True, "secrets": [{"name": "API", "scope": "~"}]}]
    )
    data["secrets"] = {"API": {"from": source}}
    return yaml.safe_dump(data, sort_keys=False)


def place(text: str, key: str) -> str:
    """``LINE:COL`` of the (first) mapping key ``key`` in ``text``."""
    for n, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith(f"{key}:"):
            return f"{n}:{line.index(key) + 1}"
    raise AssertionError(f"no {key} in the manifest")


def refused(sync: SyncProcess, sha: str, text: str, key: str, field: str = "") -> str:
    """What the sync said of revision ``sha``: refused, at the place of ``key``
    (``field``: its dotted name, by default the secret's source)."""
    field = field or f"secrets.API.from.{key}"
    where = f"sand.yaml@{sha[:12]}:{place(text, key)}: {field}:"
    # The refusal and its located lines are separate writes: wait for both (under load
    # the first can be read before the others are out).
    sync.wait_for(
        lambda: (
            sync.said(f"revision {sha[:12]} (hostile): the manifest is invalid")
            and sync.said(where)
        )
    )
    return sync.text()


def test_a_commit_with_a_command_secret_runs_nothing_on_the_host(
    tmp_path, fakepve_server, git
) -> None:
    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    good = repo.head()
    marker = tmp_path / "ran-on-the-sync-host"
    sync = start_sync(tmp_path, rig, repo, "--interval", "0.5")
    try:
        sync.wait_for(lambda: names(rig) == ["s-1"] and sync.said("applied (converged)"))
        before = len(mutations(rig))
        text = with_secret(rig, {"command": ["sh", "-c", f"id > {marker}; echo {CANARY}"]})
        bad = repo.push(text, "hostile")
        said = refused(sync, bad, text, "command")
        assert "a command would run on the sync host" in said
        ticks_pass(sync, git)  # periodic runs of the last good revision go on, the command never
        assert not marker.exists()
        assert len(mutations(rig)) == before and names(rig) == ["s-1"]
        assert sync.applying() == [good[:12]]
        assert f"last good revision stays in force ({good[:12]})" in sync.text()
    finally:
        sync.stop()
    assert not marker.exists() and CANARY not in sync.text()


def test_a_commit_naming_a_host_file_ships_nothing(tmp_path, fakepve_server, git) -> None:
    rig = fakepve_server
    home, outside = tmp_path / "home", tmp_path / "outside"
    (home / ".ssh").mkdir(parents=True)
    outside.mkdir()
    private_file(home / ".ssh" / "id_ed25519", CANARY + "-ssh\n")
    private_file(outside / "other.token", CANARY + "-abs\n")
    host_dir = rig.workdir
    (host_dir / "link.token").symlink_to(outside / "other.token")
    escape = "../outside/other.token"
    assert (host_dir / escape).resolve() == (outside / "other.token").resolve()
    sources = {
        "~/.ssh/id_ed25519": "is a host file outside --host-dir",
        str(outside / "other.token"): "is a host file outside --host-dir",
        escape: "leads out of --host-dir",
        "link.token": "leads out of --host-dir",
        # Inside --host-dir lies the host's own Proxmox token: no file there either.
        rig.token_file.name: "a file of the host's",
    }
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    good = repo.head()
    sync = start_sync(tmp_path, rig, repo, "--interval", "0.5", env={"HOME": str(home)})
    try:
        sync.wait_for(lambda: names(rig) == ["s-1"] and sync.said("applied (converged)"))
        before = len(mutations(rig))
        for path, why in sources.items():
            text = with_secret(rig, {"file": path})
            bad = repo.push(text, "hostile")
            assert why in refused(sync, bad, text, "file")
        ticks_pass(sync, git)
        assert len(mutations(rig)) == before and names(rig) == ["s-1"]
        assert sync.applying() == [good[:12]]
    finally:
        sync.stop()
    secret = rig.token_file.read_text().strip()
    for text in (sync.text(), *(f.read_text(errors="replace") for f in _files(sync.state_dir))):
        assert CANARY not in text and secret not in text


def test_a_commit_naming_host_files_or_programs_for_a_backend_is_refused(
    tmp_path, fakepve_server, git
) -> None:
    # The Proxmox token file is presented to whichever host the manifest names: a
    # commit must not make it ~/.ssh/id_ed25519. Nor choose the program sand runs.
    rig = fakepve_server
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    private_file(home / ".ssh" / "id_ed25519", CANARY + "-ssh\n")
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    good = repo.head()
    hostile = {
        "token_file": ({"token_file": "~/.ssh/id_ed25519"}, "is a host file outside"),
        "ca_file": ({"ca_file": "../../etc/ssl/certs/ca-certificates.crt"}, "leads out of"),
    }
    sync = start_sync(tmp_path, rig, repo, "--interval", "0.5", env={"HOME": str(home)})
    try:
        sync.wait_for(lambda: names(rig) == ["s-1"] and sync.said("applied (converged)"))
        before = len(mutations(rig))
        for key, (fields, why) in hostile.items():
            data = vm_manifest(rig, [{"name": "s-1"}, {"name": "s-2"}])
            data["backends"]["pve"].update(fields)  # type: ignore[index]
            text = yaml.safe_dump(data, sort_keys=False)
            bad = repo.push(text, "hostile")
            assert why in refused(sync, bad, text, key, f"backends.pve.{key}")
        data = vm_manifest(rig, [{"name": "s-1", "backend": "pve"}])
        data["backends"]["here"] = {"type": "lima", "limactl": "/bin/sh"}  # type: ignore[index]
        text = yaml.safe_dump(data, sort_keys=False)
        bad = repo.push(text, "hostile")
        refused(sync, bad, text, "limactl", "backends.here.limactl")
        ticks_pass(sync, git)
        assert len(mutations(rig)) == before and names(rig) == ["s-1"]
        assert sync.applying() == [good[:12]]
        assert {r.token for r in rig.log} == {rig.token_id}  # only ever the host's token
    finally:
        sync.stop()
    assert CANARY not in sync.text()


def test_a_revision_in_force_before_a_restart_is_checked_again(
    tmp_path, fakepve_server, git
) -> None:
    # What an older sand took in as good (a host file for a backend) is not applied by
    # this one after a restart: it is refused, and nothing runs until a valid commit.
    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    good = repo.head()
    sync = start_sync(tmp_path, rig, repo, "--interval", "0.5")
    try:
        sync.wait_for(lambda: sync.said(f"revision {good[:12]} applied (converged)"))
    finally:
        sync.stop()
    data = vm_manifest(rig, [{"name": "s-1"}, {"name": "s-2"}])
    data["backends"]["pve"]["token_file"] = str(rig.token_file)  # type: ignore[index]
    (stored,) = (sync.state_dir / "sync").glob(f"*/revisions/{good}/sand.yaml")
    stored.write_text(yaml.safe_dump(data, sort_keys=False))
    before = len(mutations(rig))
    again = SyncProcess(sync.workdir, *sync.argv[4:])
    try:
        again.wait_for(lambda: again.said("the manifest is invalid"))
        ticks_pass(again, git)
        said = again.text()
        assert f"revision {good[:12]} (in force until now): the manifest is invalid" in said
        assert f"sand.yaml@{good[:12]}:" in said and "backends.pve.token_file" in said
        assert again.applying() == [] and len(mutations(rig)) == before
        assert names(rig) == ["s-1"]
        fixed = repo.push(vm_manifest(rig, [{"name": "s-1"}, {"name": "s-2"}]), "fixed")
        again.wait_for(lambda: names(rig) == ["s-1", "s-2"])
        assert again.applying() == [fixed[:12]]
    finally:
        again.stop()


def _files(root: Path) -> list[Path]:
    return [f for f in root.rglob("*") if f.is_file()]


def test_a_token_is_not_sent_over_plain_http(tmp_path) -> None:
    with GitServer(GIT_TOKEN, host="127.0.0.1") as plain:
        url = plain.create_repo("fleet", {"sand.yaml": "apiVersion: sand/v1\n"})
        token = private_file(tmp_path / "git.token", GIT_TOKEN + "\n")
        done = Sand(tmp_path).run("sync", "--once", "--repo", url, "--token-file", str(token))
        assert done.returncode == 1, done.stderr
        assert "in clear over http://" in done.stderr and "Traceback" not in done.stderr
        assert plain.request_log == []  # not one request: the token never left


def test_a_broken_host_secrets_map_is_refused_at_its_line(tmp_path, fakepve_server, git) -> None:
    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    (rig.workdir / "secrets.yaml").write_text("secrets:\n  API:\n    from: {flie: api.token}\n")
    token = private_file(tmp_path / "git.token", GIT_TOKEN)
    args = ("--repo", repo.url, "--token-file", str(token), "--host-dir", str(rig.workdir))
    done = Sand(tmp_path).run("sync", "--once", *args)
    assert done.returncode == 1
    assert f"{rig.workdir / 'secrets.yaml'}:3:" in done.stderr and "flie" in done.stderr
    assert names(rig) == [] and git.request_log == []


class _Redirect(BaseHTTPRequestHandler):
    """Answers every request with a redirect to the same path on ``server.target``."""

    server: Any

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_GET(self) -> None:
        self.send_response(301)
        self.send_header("Location", self.server.target + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()


def test_a_token_does_not_follow_a_redirect_to_plain_http(tmp_path, fakepve_rig_pki) -> None:
    # An https:// repository that redirects to http:// must not get the token in clear.
    with GitServer(GIT_TOKEN, host="127.0.0.1") as plain:
        plain.create_repo("fleet", {"sand.yaml": "apiVersion: sand/v1\n"})
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirect)
        server.target = plain.base_url  # type: ignore[attr-defined]
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(*fakepve_rig_pki)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            url = f"https://127.0.0.1:{server.server_address[1]}/fleet.git"
            token = private_file(tmp_path / "git.token", GIT_TOKEN + "\n")
            done = Sand(tmp_path).run(
                "sync", "--once", "--repo", url, "--token-file", str(token),
                env={"GIT_SSL_CAINFO": fakepve_rig_pki[0]},
            )  # fmt: skip
        finally:
            server.shutdown()
            server.server_close()
        assert done.returncode == 1
        assert [ok for _path, ok in plain.request_log if ok] == []  # never authenticated
