"""The desired-state cache never changes a plan: an unchanged manifest is planned from
it (the manifest itself never read), and anything the desired state is made from
changed (the manifest, a secret's file named in it, the host's timezone, sand's code)
is read anew; a cache file that is not what this sand wrote is ignored and rewritten;
no secret value is ever in it. Planned against fakepve, as ``sand plan`` runs."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml

from sand import asyncrun, desired_cache, manifest_key
from sand.manifest import LoadedManifest, load_manifest
from sand.plan import Action, Plan
from sand.project import Session, desired_from, open_session
from sand.survey.guest_secrets import GuestSecrets
from sand.survey.plan import compute_plan
from tests.fakepve_rig.rig import FakePveRig

ENTRIES = [{"name": f"e-{i}"} for i in range(3)]


@pytest.fixture
def rig(fakepve_server: FakePveRig) -> FakePveRig:
    for i, vm in enumerate(fakepve_server.desired(ENTRIES)):
        fakepve_server.seed_managed(vm, 300 + i)
    return fakepve_server


def write(path: Path, manifest: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def plan_of(manifest: Path) -> tuple[Plan, Session]:
    session = open_session(manifest, lock=False, send_listings=True)

    async def run() -> Plan:
        try:
            return await compute_plan(session)
        finally:
            await session.close()

    return asyncrun.run(run()), session


def from_cache(session: Session) -> bool:
    """The session's desired state was read from the cache: its manifest never loaded."""
    return not isinstance(session.source, LoadedManifest)


def test_an_unchanged_manifest_plans_from_the_cache_and_an_edit_is_planned(
    rig: FakePveRig, tmp_path: Path
) -> None:
    manifest = write(tmp_path / "sand.yaml", rig.manifest(ENTRIES))
    first, session = plan_of(manifest)
    assert not first.has_changes and not from_cache(session)
    again, session = plan_of(manifest)
    assert not again.has_changes and from_cache(session)  # the plan never needed it
    assert [c.desired for c in again.changes] == [c.desired for c in first.changes]

    write(manifest, rig.manifest([ENTRIES[0], {"name": "e-1", "memory": "6GiB"}, ENTRIES[2]]))
    edited, session = plan_of(manifest)
    assert not from_cache(session)
    [change] = [c for c in edited.changes if c.action is not Action.NOOP]
    assert change.vm == "e-1" and change.desired is not None
    assert change.desired.memory == 6 << 30
    assert plan_of(manifest)[0].changes == edited.changes  # and from the cache, the same


def with_secret(rig: FakePveRig, source: str) -> dict[str, Any]:
    vms = [{**ENTRIES[0], "provision": True, "secrets": [{"name": "API_TOKEN", "scope": "~/src"}]}]
    return {**rig.manifest(vms), "secrets": {"API_TOKEN": {"from": {"file": source}}}}


def private(path: Path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o600)
    return path.name


def test_a_secret_file_named_anew_is_read_and_no_value_is_cached(
    rig: FakePveRig, tmp_path: Path
) -> None:
    canaries = ("canary-5f1e0c-alpha", "canary-5f1e0c-beta")
    first = private(tmp_path / "a.token", canaries[0])
    second = private(tmp_path / "b.token", canaries[1])
    manifest = write(tmp_path / "sand.yaml", with_secret(rig, first))

    def stamps() -> tuple[dict[str, str], bool]:
        session = open_session(manifest, lock=False)
        asyncrun.run(session.close())
        cached = from_cache(session)  # before the secrets are read from its manifest
        return dict(GuestSecrets(session).stamps(session.desired)), cached

    before, cached = stamps()
    assert before and not cached
    assert stamps() == (before, True)  # from the cache: the same values stamped
    write(manifest, with_secret(rig, second))
    after, cached = stamps()
    assert after.keys() == before.keys() and after != before and not cached
    held = desired_cache.cache_path(manifest).read_bytes()
    assert b"API_TOKEN" in held  # the secret's name and where it goes: never its value
    assert not any(canary.encode() in held for canary in canaries)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda text: b"{not json",
        lambda text: text[: len(text) // 2],  # cut short
        lambda text: text.replace(b'{"format":', b'{"format":99,"was":', 1),  # another sand's
        lambda text: text.replace(b'"key":"', b'"key":"0'),  # made of other inputs
        lambda text: text.replace(b'"memory":', b'"memory":"x",,"m":'),
    ],
    ids=["not-json", "cut-short", "other-format", "other-key", "broken-record"],
)
def test_a_cache_file_not_as_written_is_ignored_and_rewritten(
    rig: FakePveRig, tmp_path: Path, spoil: Any
) -> None:
    manifest = write(tmp_path / "sand.yaml", rig.manifest(ENTRIES))
    plan_of(manifest)
    cached = desired_cache.cache_path(manifest)
    good = cached.read_bytes()
    cached.write_bytes(spoil(good))
    plan, session = plan_of(manifest)
    assert not plan.has_changes and not from_cache(session)
    assert cached.read_bytes() == good  # written anew
    assert from_cache(plan_of(manifest)[1])


def test_the_hosts_timezone_is_read_anew(
    rig: FakePveRig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest = write(tmp_path / "sand.yaml", rig.manifest(ENTRIES))
    zones = []
    for zone in ("Europe/Berlin", "Asia/Tokyo", "Asia/Tokyo"):
        monkeypatch.setenv("TZ", zone)  # a VM that names no timezone gets the host's
        session = open_session(manifest, lock=False)
        asyncrun.run(session.close())
        zones.append((session.desired.vms[0].timezone, from_cache(session)))
    assert zones == [("Europe/Berlin", False), ("Asia/Tokyo", False), ("Asia/Tokyo", True)]


def test_a_change_to_the_code_that_resolves_a_manifest_is_read_anew(
    rig: FakePveRig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    code = tmp_path / "code"
    code.mkdir()
    (code / "spec.py").write_text("A = 1\n")
    monkeypatch.setattr(manifest_key, "_CODE", (code,))  # sand's own, standing in
    manifest = write(tmp_path / "sand.yaml", rig.manifest(ENTRIES))
    seen = []
    for edit in ("", "", "A = 2  # an upgrade, or a checkout in an editable install\n"):
        if edit:
            (code / "spec.py").write_text(edit)
        seen.append(from_cache(plan_of(manifest)[1]))
    assert seen == [False, True, False]


def test_the_cache_is_the_users_own_in_the_user_cache_dir(
    rig: FakePveRig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SAND_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    manifest = write(tmp_path / "sand.yaml", rig.manifest(ENTRIES))
    plan_of(manifest)
    [held] = (tmp_path / "cache" / "sand" / "desired").iterdir()
    assert held == desired_cache.cache_path(manifest)
    assert stat.S_IMODE(held.stat().st_mode) == 0o600
    assert stat.S_IMODE(held.parent.stat().st_mode) == 0o700
    assert json.loads(held.read_bytes())["project"] == "demo"
    assert os.path.getsize(held) > 0


# Every kind of field a DesiredVM holds, set: a golden image (its base and steps), a
# derived base, a pool and its spares, a fork, repos, secrets, ports, preserve,
# expires (both kinds) and idle.
EVERY_FIELD = """\
apiVersion: sand/v1
project: demo
backends:
  pve: {type: proxmox, host: pve.test, node: pve1, pool: sand, storage: local-lvm,
        template: 9000, token_file: pve.token, identity: id_ed25519}
  laptop: {type: lima}
images:
  wb:
    packages: [jq]
    agents: [claude, codex]
    steps:
      - {name: rust, run: "echo rust", timeout: 600}
pools:
  agents: {warm: 2, memory: 4GiB}
secrets:
  GITHUB_TOKEN:
    from: {env: SAND_GITHUB_TOKEN}
  GH_BROKERED:
    from: {env: SAND_GH_BROKERED}
    deliver: broker
    broker:
      repositories: [https://git.example.com/acme/api.git]
      push: ["agent/*"]
repos:
  webapp: {url: https://github.com/acme/webapp.git, branch: main, token: GITHUB_TOKEN}
  api: {url: https://git.example.com/acme/api, token: GH_BROKERED}
defaults:
  backend: pve
  preserve: [~/src]
  idle: {after: 3h, then: stop}
  egress: {policy: deny, cidrs: [10.1.0.0/16], ports: [443, 22]}
vms:
  - name: a
    image: wb
    repos: [webapp, api]
    secrets: [{name: GITHUB_TOKEN, scope: ~/src/webapp}, {name: GH_BROKERED, scope: ~/src}]
    expires: 8h
  - name: b
    backend: laptop
    image: debian-12
    ports: [{guest: 3000, host: 3000}]
    packages: [ripgrep]
    expires: 2030-01-01T00:00:00Z
    idle: never
    egress: {policy: allow}
  - name: c
    from: {vm: a, logins: [claude]}
  - name: d
    pool: agents
"""


def test_every_kind_of_field_reads_back_as_built(tmp_path: Path) -> None:
    file = tmp_path / "sand.yaml"
    file.write_text(EVERY_FIELD)
    loaded = load_manifest(file)
    built = desired_from(loaded)
    assert {vm.name for vm in built.vms if vm.spare} and any(vm.fork for vm in built.vms)
    assert any(vm.base and not vm.golden for vm in built.vms)  # a derived base too
    assert any(vm.brokered for vm in built.vms) and any(vm.egress for vm in built.vms)
    inputs = ("Etc/UTC", "C.UTF-8", "bundle", "machine")
    desired_cache.keep_desired(file, file.read_bytes(), inputs, loaded, built)
    hit = desired_cache.cached_desired(file, file.read_bytes(), inputs, lambda: loaded.manifest)
    assert hit is not None
    read, configs = hit
    assert configs == loaded.manifest.backends
    assert (read.project, read.backends, read.pools) == ("demo", ("pve", "laptop"), {"agents": 2})
    assert read.vms == built.vms  # every field, the records and tuples they hold
    for a, b in zip(read.vms, built.vms, strict=True):
        assert (a.fingerprint, a.guest_fingerprint) == (b.fingerprint, b.guest_fingerprint)
        assert {k: type(v) for k, v in vars(a).items()} == {k: type(v) for k, v in vars(b).items()}
