"""``sand sync`` on the far side: a real git smart-HTTP server (token-protected
``git http-backend``) holds the manifest, fakepve holds the VMs, and ``sand sync``
runs as a process of its own. What is asserted is read from fakepve (its VMs and
its request log), the git server's log, the sync's own words and state files."""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.audit.helpers import audit_records
from tests.cli.sync_rig import (
    Repo,
    SyncProcess,
    free_port,
    https_git,
    pin_proxmox,
    private_file,
    ticks_pass,
)
from tests.fakepve_rig.rig import FakePveRig
from tests.rig.gitserver import GitServer

GIT_TOKEN = "git-canary-token-5d1c9e"  # never to be seen anywhere but the git server
HOOK_SECRET = "hook-secret-8c2f61a7"


def vm_manifest(rig: FakePveRig, vms: list[dict[str, object]]) -> dict[str, object]:
    """A manifest as a team checks it in: the token file, key and CA by relative paths,
    which ``sand sync`` finds on the host (``--host-dir``), never in the repository;
    the host pins the backend's address there."""
    data = rig.manifest(vms)
    backend = data["backends"]["pve"]  # type: ignore[index]
    ca = rig.workdir / "pve-ca.pem"
    if not ca.exists():
        shutil.copy(rig.ca_file, ca)
    backend["token_file"] = rig.token_file.name
    backend["identity"] = rig.identity.name
    backend["ca_file"] = ca.name
    pin_proxmox(rig.workdir, rig.host, rig.port, ca.name)  # the host's word on its address
    return data


@pytest.fixture
def git(fakepve_rig_pki, monkeypatch) -> Iterator[GitServer]:
    with https_git(GIT_TOKEN, fakepve_rig_pki, monkeypatch) as server:
        yield server


def start_sync(tmp: Path, rig: FakePveRig, repo: Repo, *args: str, name: str = "a", **kw: str):
    workdir = tmp / name
    workdir.mkdir()
    token = private_file(workdir / "git.token", GIT_TOKEN + "\n")
    return SyncProcess(
        workdir,
        "--repo", repo.url,
        "--token-file", str(token),
        "--host-dir", str(rig.workdir),
        *args,
        env=kw.get("env"),  # type: ignore[arg-type]
    )  # fmt: skip


def start_hooked_sync(
    tmp: Path, rig: FakePveRig, repo: Repo, env: dict[str, str] | None = None
) -> tuple[SyncProcess, int]:
    """A sync woken by webhooks only (its interval an hour), and the port it hears on."""
    port = free_port()
    secret = private_file(tmp / "hook.secret", HOOK_SECRET + "\n")
    sync = start_sync(
        tmp, rig, repo,
        "--interval", "3600",
        "--listen", f"127.0.0.1:{port}",
        "--webhook-secret-file", str(secret),
        env=env,  # type: ignore[arg-type]
    )  # fmt: skip
    return sync, port


def mutations(rig: FakePveRig) -> list:
    return [r for r in rig.log if r.method in ("POST", "PUT", "DELETE") and r.status == 200]


def names(rig: FakePveRig) -> list[str]:
    return sorted(vm.name for vm in rig.vms())


def test_each_pushed_commit_is_applied_exactly_once(tmp_path, fakepve_server, git) -> None:
    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    first = repo.head()
    sync = start_sync(tmp_path, rig, repo, "--interval", "0.5")
    try:
        sync.wait_for(lambda: names(rig) == ["s-1"])
        sync.wait_for(lambda: sync.said(f"revision {first[:12]} applied"))
        second = repo.push(vm_manifest(rig, [{"name": "s-1", "cpus": 3}, {"name": "s-2"}]))
        sync.wait_for(lambda: names(rig) == ["s-1", "s-2"])
        sync.wait_for(lambda: sync.said(f"revision {second[:12]} applied (converged)"))
        (s1,) = rig.vms_named("s-1")
        assert int(rig.vm(s1.vmid).config["cores"]) == 3
        ticks_pass(sync, git)  # several periodic checks: none applies a revision again
        assert sync.applying() == [first[:12], second[:12]]
        state = json.loads(next((sync.state_dir / "sync").glob("*/sync.json")).read_text())
        assert (state["applied"], state["applied_ok"], state["good"]) == (second, True, second)
    finally:
        sync.stop()
    # A restart finds the revision applied: it applies nothing again.
    again = SyncProcess(sync.workdir, *sync.argv[4:])
    try:
        again.wait_for(lambda: again.said("No changes."))
        ticks_pass(again, git, 2)
        assert again.applying() == []
    finally:
        again.stop()
    # The token went to the git server only: every fetch authenticated, and it is in
    # no argv, output, or file of sand's state.
    assert git.request_log and all(ok for path, ok in git.request_log if "upload-pack" in path)
    assert GIT_TOKEN not in " ".join(sync.argv) + sync.text() + again.text()
    for f in sync.state_dir.rglob("*"):
        if f.is_file():
            assert GIT_TOKEN.encode() not in f.read_bytes(), f


def test_an_invalid_commit_changes_nothing_and_names_revision_and_line(
    tmp_path, fakepve_server, git
) -> None:
    rig = fakepve_server
    good = vm_manifest(rig, [{"name": "s-1"}])
    repo = Repo(git, "fleet", good)
    sync = start_sync(tmp_path, rig, repo, "--interval", "0.5")
    try:
        sync.wait_for(lambda: names(rig) == ["s-1"] and sync.said("applied (converged)"))
        before = len(mutations(rig))
        broken = yaml.safe_dump(
            vm_manifest(rig, [{"name": "s-1", "cpus": "lots"}, {"name": "s-2"}]), sort_keys=False
        )
        bad = repo.push(broken, "a typo")
        line = next(n for n, text in enumerate(broken.splitlines(), 1) if "lots" in text)
        sync.wait_for(lambda: sync.said("the manifest is invalid"))
        ticks_pass(sync, git)  # periodic runs of the last good revision go on
        said = sync.text()
        assert f"revision {bad[:12]} (a typo): the manifest is invalid" in said
        assert f"sand.yaml@{bad[:12]}:{line}:" in said
        assert names(rig) == ["s-1"] and len(mutations(rig)) == before
        assert said.count(f"revision {bad[:12]} (a typo)") == 1  # reported once
        fixed = repo.push(vm_manifest(rig, [{"name": "s-1"}, {"name": "s-2"}]), "fixed")
        sync.wait_for(lambda: names(rig) == ["s-1", "s-2"])
        assert sync.applying()[-1] == fixed[:12]
    finally:
        sync.stop()


def _post(port: int, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/git", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_the_webhook_pokes_a_fetch_and_a_bad_signature_is_refused(
    tmp_path, fakepve_server, git
) -> None:
    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    sync, port = start_hooked_sync(tmp_path, rig, repo)
    try:
        sync.wait_for(lambda: names(rig) == ["s-1"] and sync.said("applied (converged)"))
        pushed = repo.push(vm_manifest(rig, [{"name": "s-1"}, {"name": "s-2"}]))
        fetches = len(git.request_log)
        body = json.dumps({"ref": "refs/heads/main", "after": pushed}).encode()
        forged = "sha256=" + hmac.new(b"not the secret", body, hashlib.sha256).hexdigest()
        assert _post(port, body, {"X-Hub-Signature-256": forged}) == 401
        assert _post(port, body, {"X-Gitlab-Token": "guess"}) == 401
        assert _post(port, body, {}) == 401
        sync.wait_for(lambda: sync.said("webhook from 127.0.0.1 refused"))
        time.sleep(1)
        assert len(git.request_log) == fetches and names(rig) == ["s-1"]  # nothing moved

        signed = "sha256=" + hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert _post(port, body, {"X-Hub-Signature-256": signed}) == 202
        sync.wait_for(lambda: names(rig) == ["s-1", "s-2"], timeout=30)
        assert sync.applying()[-1] == pushed[:12]
        third = repo.push(vm_manifest(rig, [{"name": "s-1"}, {"name": "s-2", "cpus": 3}]))
        assert _post(port, b"{}", {"X-Gitlab-Token": HOOK_SECRET}) == 202
        (s2,) = rig.vms_named("s-2")
        sync.wait_for(lambda: int(rig.vm(s2.vmid).config["cores"]) == 3, timeout=30)
        assert sync.applying()[-1] == third[:12]
        assert HOOK_SECRET not in sync.text()
    finally:
        sync.stop()


def test_once_applies_the_head_and_exits_for_ci(tmp_path, fakepve_server, git) -> None:
    from tests.cli.helpers import Sand

    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    token = private_file(tmp_path / "git.token", GIT_TOKEN)
    sand = Sand(tmp_path)
    args = ("sync", "--once", "--repo", repo.url, "--token-file", str(token))
    done = sand.run(*args, "--host-dir", str(rig.workdir))
    assert done.returncode == 0, done.stderr
    assert names(rig) == ["s-1"]
    # the host's audit trail names the commit the change came from
    (made,) = [r for r in audit_records(sand.state_dir) if r["kind"] == "apply.change"]
    assert (made["vm"], made["change"], made["commit"]) == ("s-1", "create", repo.head())
    bad = repo.push("apiVersion: sand/v1\nproject: demo\nvms: [\n", "broken")
    failed = sand.run(*args, "--host-dir", str(rig.workdir))
    assert failed.returncode == 1
    assert f"sand.yaml@{bad[:12]}:" in failed.stderr and names(rig) == ["s-1"]
    # Host files are looked for on the host: without --host-dir (here: the current
    # directory, which pins no backend) nothing is reached, nothing applied.
    repo.push(vm_manifest(rig, [{"name": "s-1"}, {"name": "s-2"}]), "more")
    elsewhere = sand.run(*args)
    assert elsewhere.returncode == 1 and names(rig) == ["s-1"]
    assert "pins.yaml does not pin its address" in elsewhere.stderr


def test_the_git_token_reaches_git_in_no_argv_and_a_url_with_one_is_refused(
    tmp_path, git, monkeypatch
) -> None:
    import asyncio
    import threading

    from sand.loops.gitmirror import GitMirror

    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    repo = Repo(git, "fleet", {"apiVersion": "sand/v1"})
    token = private_file(tmp_path / "git.token", GIT_TOKEN + "\n")
    seen: list[str] = []
    gits: list[str] = []  # proof the sampling catches git at work
    sampling = threading.Event()
    sampling.set()

    def sample() -> None:  # every process's argv, as often as it can, while git runs
        while sampling.is_set():
            for proc in Path("/proc").iterdir():
                try:
                    argv = (proc / "cmdline").read_bytes()
                except OSError:
                    continue
                if GIT_TOKEN.encode() in argv:
                    seen.append(argv.decode(errors="replace"))
                if b"fleet.git" in argv:
                    gits.append(argv.decode(errors="replace"))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        mirror = GitMirror(repo.url, "main", token_file=token)
        for _ in range(5):
            head = asyncio.run(mirror.fetch())
            repo.push({"apiVersion": "sand/v1", "n": head.sha})
    finally:
        sampling.clear()
        sampler.join(10)
    assert head.sha and seen == [] and gits
    fetched = [ok for path, ok in git.request_log if path.endswith("git-upload-pack")]
    assert len(fetched) >= 5 and all(fetched)  # every fetch authenticated, with the token
    for f in (tmp_path / "state").rglob("*"):
        if f.is_file():
            assert GIT_TOKEN.encode() not in f.read_bytes(), f

    from tests.cli.helpers import Sand

    before = len(git.request_log)
    with_token = repo.url.replace("https://", f"https://x:{GIT_TOKEN}@")
    refused = Sand(tmp_path).run("sync", "--once", "--repo", with_token)
    assert refused.returncode == 1 and "holds a password" in refused.stderr
    assert GIT_TOKEN not in refused.stderr and len(git.request_log) == before
