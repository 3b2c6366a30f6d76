"""A commit must not choose where the sync host's credentials go.

The manifest names each backend's address, and the sync host presents its own
credentials there: its Proxmox token to the API's ``host:``/``port:``, its SSH keys to
a remote Lima host, a mapped secret to the repository a VM clones. The host pins each
in ``<host-dir>/pins.yaml``; a commit naming another address is refused at its place in
the revision before any request. The committer's server here is a real listener on
another loopback address that counts the connections it gets and keeps every byte
(after TLS, as the server a committer runs would read them)."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Iterator

import pytest
import yaml

from tests.cli.helpers import Sand
from tests.cli.sync_rig import Repo, https_git, private_file
from tests.cli.test_sync import GIT_TOKEN, mutations, names, start_sync, vm_manifest
from tests.cli.test_sync_secrets import place
from tests.fakepve_rig.rig import FakePveRig
from tests.rig.acceptloop import AcceptLoop
from tests.rig.gitserver import GitServer


class Listener:
    """A committer's server: accepts on ``host``, counts connections, keeps what each
    sends (decrypted when ``tls`` is given, as its owner would read it)."""

    def __init__(self, host: str, tls: ssl.SSLContext | None = None) -> None:
        self.sock = socket.create_server((host, 0))
        self.host, self.port = host, int(self.sock.getsockname()[1])
        self.tls = tls
        self.connections = 0
        self.received = bytearray()
        self.accepting = AcceptLoop(self.sock, self._accepted, "committer-listener")

    def _accepted(self, conn: socket.socket) -> None:
        self.connections += 1
        threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(30)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            while chunk := conn.recv(65536):
                self.received += chunk
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.accepting.close()


@pytest.fixture
def git(fakepve_rig_pki, monkeypatch) -> Iterator[GitServer]:
    with https_git(GIT_TOKEN, fakepve_rig_pki, monkeypatch) as server:
        yield server


@pytest.fixture
def tls_server(fakepve_rig_pki) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*fakepve_rig_pki)
    return context


def _token_secret(rig: FakePveRig) -> bytes:
    return rig.token_file.read_text().strip().split("=", 1)[1].encode()


def test_a_commit_pointing_the_proxmox_backend_elsewhere_sends_it_nothing(
    tmp_path, fakepve_server, git, tls_server
) -> None:
    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    good = repo.head()
    elsewhere = Listener("127.0.0.2", tls_server)  # another host, a certificate any client takes
    same_host = Listener(rig.host, tls_server)  # the pinned host, another port
    hostile = {
        "host": {"host": elsewhere.host, "port": elsewhere.port, "verify_tls": False},
        "port": {"port": same_host.port, "verify_tls": False},
    }
    sync = start_sync(tmp_path, rig, repo, "--interval", "0.5")
    try:
        sync.wait_for(lambda: names(rig) == ["s-1"] and sync.said("applied (converged)"))
        before = len(mutations(rig))
        for key, fields in hostile.items():
            data = vm_manifest(rig, [{"name": "s-1"}, {"name": "s-2"}])
            data["backends"]["pve"].update(fields)  # type: ignore[index]
            text = yaml.safe_dump(data, sort_keys=False)
            bad = repo.push(text, "hostile")
            where = f"sand.yaml@{bad[:12]}:{place(text, key)}: backends.pve.{key}: "
            sync.wait_for(
                lambda where=where: (
                    sync.said(where) or elsewhere.connections + same_host.connections > 0
                )
            )
            assert sync.said(f"revision {bad[:12]} (hostile): the manifest is invalid")
            assert "is not where the host sends backend pve's credentials" in sync.text()
        # The revision in force goes on being run, against the pinned host only.
        seen = len(rig.log)
        sync.wait_for(lambda: len(rig.log) > seen and sync.said("No changes."))
        assert len(mutations(rig)) == before and names(rig) == ["s-1"]
        assert sync.applying() == [good[:12]]
    finally:
        sync.stop()
        elsewhere.close()
        same_host.close()
    assert (elsewhere.connections, same_host.connections) == (0, 0)
    secret = _token_secret(rig)
    assert secret not in elsewhere.received and secret not in same_host.received
    assert len(elsewhere.received) + len(same_host.received) == 0


def test_a_commit_moving_a_remote_lima_host_connects_nowhere(tmp_path, fakepve_server, git) -> None:
    # The sync host's SSH keys (and, through the Lima host, the guests' secrets) would go
    # to whichever host a remote Lima backend names: pinned too.
    rig = fakepve_server
    listener = Listener("127.0.0.3")
    lima_vm = {"name": "l-1", "backend": "build", "image": "debian-12"}
    data = vm_manifest(rig, [{"name": "s-1", "backend": "pve"}, lima_vm])
    data["backends"]["build"] = {  # type: ignore[index]
        "type": "lima",
        "ssh": {
            "host": listener.host,
            "port": listener.port,
            "user": "dev",
            "known_hosts": "known_hosts",
        },
    }
    # The host's own pin of its Lima host's key: sand would connect before it compares.
    private_file(rig.workdir / "known_hosts", "")
    pins = yaml.safe_load((rig.workdir / "pins.yaml").read_text())
    pins["backends"]["build"] = {
        "ssh": {"host": "build-box.lan", "user": "dev", "known_hosts": "known_hosts"}
    }
    (rig.workdir / "pins.yaml").write_text(yaml.safe_dump(pins))
    repo = Repo(git, "fleet", data)
    text = yaml.safe_dump(data)  # as Repo commits it
    token = private_file(tmp_path / "git.token", GIT_TOKEN)
    args = ("--repo", repo.url, "--token-file", str(token), "--host-dir", str(rig.workdir))
    try:
        done = Sand(tmp_path).run("sync", "--once", *args)
    finally:
        listener.close()
    assert done.returncode == 1, done.stderr
    line = text.splitlines().index("    ssh:") + 2  # host: is the first key under ssh:
    where = f"sand.yaml@{repo.head()[:12]}:{line}:7: backends.build.ssh.host: "
    assert where in done.stderr, done.stderr
    assert "pins host build-box.lan" in done.stderr and "Traceback" not in done.stderr
    assert listener.connections == 0 and names(rig) == [] and mutations(rig) == []


def test_a_repository_token_goes_only_where_the_host_allows(tmp_path, fakepve_server, git) -> None:
    rig = fakepve_server
    private_file(rig.workdir / "gh.token", "gh-canary-token-71ac\n")
    (rig.workdir / "secrets.yaml").write_text("secrets:\n  GH:\n    from: {file: gh.token}\n")

    def manifest(url: str) -> str:
        data = vm_manifest(rig, [{"name": "s-1", "repos": ["app"]}])
        data["secrets"] = {"GH": {}}
        data["repos"] = {"app": {"url": url, "token": "GH"}}
        return yaml.safe_dump(data, sort_keys=False)

    token = private_file(tmp_path / "git.token", GIT_TOKEN)
    repo = Repo(git, "fleet", yaml.safe_load(manifest("https://127.0.0.4/acme-evil/app.git")))
    args = ("--repo", repo.url, "--token-file", str(token), "--host-dir", str(rig.workdir))
    sand = Sand(tmp_path)
    unpinned = sand.run("sync", "--once", *args)
    assert unpinned.returncode == 1
    assert "repos.app.token: the host does not say where its secret GH may be sent" in (
        unpinned.stderr
    )
    pins = yaml.safe_load((rig.workdir / "pins.yaml").read_text())
    pins["tokens"] = {"GH": ["https://git.example.org/acme"]}
    (rig.workdir / "pins.yaml").write_text(yaml.safe_dump(pins))
    for url in ("https://127.0.0.4/acme/app.git", "https://git.example.org/acme-evil/app.git"):
        text = manifest(url)
        bad = repo.push(text, "hostile")
        done = sand.run("sync", "--once", *args)
        assert done.returncode == 1
        assert f"sand.yaml@{bad[:12]}:{place(text, 'url')}: repos.app.url: " in done.stderr
        assert "allows the secret GH to be sent only to https://git.example.org/acme" in (
            done.stderr
        )
    assert names(rig) == [] and mutations(rig) == []
    # Within the pinned prefix it is taken in and applied.
    repo.push(manifest("https://git.example.org/acme/app.git"), "fine")
    done = sand.run("sync", "--once", *args)
    assert "manifest valid" in done.stderr and names(rig) == ["s-1"]


def test_a_revision_refused_for_want_of_a_pin_is_applied_once_the_host_pins_it(
    tmp_path, fakepve_server, git
) -> None:
    # The host's files may change between two starts: the revision refused before is
    # checked again at a start, not left refused until the next commit.
    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    pins = rig.workdir / "pins.yaml"
    pinned = pins.read_text()
    pins.unlink()
    token = private_file(tmp_path / "git.token", GIT_TOKEN)
    args = ("--repo", repo.url, "--token-file", str(token), "--host-dir", str(rig.workdir))
    sand = Sand(tmp_path)
    refused = sand.run("sync", "--once", *args)
    assert refused.returncode == 1 and "does not pin its address" in refused.stderr
    assert names(rig) == []
    pins.write_text(pinned)
    done = sand.run("sync", "--once", *args)
    assert done.returncode == 0, done.stderr
    assert f"revision {repo.head()[:12]} (initial): manifest valid" in done.stderr
    assert names(rig) == ["s-1"]


def test_a_run_of_a_repository_manifest_is_held_to_the_pins_too(
    tmp_path, fakepve_server, tls_server
) -> None:
    # The second lock: a revision that reaches a run without the sync's check (its
    # stored copy changed since) still sends the host's token nowhere unpinned.
    import asyncio

    from sand.loops.unattended import Reconciler

    rig = fakepve_server
    listener = Listener("127.0.0.2", tls_server)
    data = vm_manifest(rig, [{"name": "s-1"}])
    data["backends"]["pve"].update(  # type: ignore[index]
        host=listener.host, port=listener.port, verify_tls=False
    )
    file = tmp_path / "revision" / "sand.yaml"
    file.parent.mkdir()
    file.write_text(yaml.safe_dump(data))
    reconciler = Reconciler(parallelism=2, allow_mass_delete=False, command="sync")
    try:
        result = asyncio.run(reconciler.run(file, "periodic", host_dir=rig.workdir))
    finally:
        listener.close()
    assert listener.connections == 0 and listener.received == b""
    assert not result.ok and rig.log == []
    assert "backends.pve.host: 127.0.0.2 is not where the host sends" in str(result.error)
