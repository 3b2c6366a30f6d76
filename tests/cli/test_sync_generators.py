"""``sand sync`` and generators: a GitHub event about a work item (an issue labelled),
signed like a push's, wakes the sync to run the revision in force, whose generator then
reads its items from GitHub itself; the event's body is never read (issue 43, item 5)."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterator

import pytest

from tests.cli.sync_rig import Repo
from tests.cli.test_sync import HOOK_SECRET, _post, git, names, start_hooked_sync, vm_manifest
from tests.rig.fakegithub import FakeGitHub, FakeGitHubServer

__all__ = ["git"]  # the fixture, imported to be used here


@pytest.fixture
def github() -> Iterator[FakeGitHubServer]:
    server = FakeGitHubServer(FakeGitHub(permissions={"alice": "write"}))
    yield server
    server.stop()


def test_a_label_event_wakes_the_sync_and_the_vm_appears(
    tmp_path, fakepve_server, git, github
) -> None:
    rig = fakepve_server
    data = vm_manifest(rig, [{"name": "s-1"}])
    data["repos"] = {"app": {"url": "https://github.com/acme/app.git"}}
    source = {"repo": "app", "github": "acme/app", "label": "sand", "api": github.api}
    data["generators"] = {"triage": {"max": 5, "prefix": "issue", "github": source}}
    sync, port = start_hooked_sync(tmp_path, rig, Repo(git, "fleet", data))
    try:
        sync.wait_for(lambda: names(rig) == ["s-1"] and sync.said("applied (converged)"))
        github.fake.open_issue(5, "alice", "Fix the login")
        github.fake.label(5, "sand", by="alice")
        # What the body says is not read: a forged item in it makes nothing.
        body = json.dumps({"action": "labeled", "issue": {"number": 99}}).encode()
        forged = "sha256=" + hmac.new(b"guess", body, hashlib.sha256).hexdigest()
        assert _post(port, body, {"X-Hub-Signature-256": forged, "X-GitHub-Event": "issues"}) == 401
        signed = "sha256=" + hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
        event = {"X-Hub-Signature-256": signed, "X-GitHub-Event": "issues"}
        assert _post(port, body, event) == 202
        sync.wait_for(lambda: names(rig) == ["issue-5", "s-1"], timeout=60)
        assert "issue-99" not in sync.text()
    finally:
        sync.stop()
