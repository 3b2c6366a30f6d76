"""The GitHub generator against a fake of the REST endpoints it calls, served over real
HTTP (tests/rig/fakegithub.py, written from GitHub's API description): only items a
writer authored or labelled make a VM, an unchanged poll is one conditional request
answered 304, and a rate limit holds every request until it lifts (issue 43, item 5)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.manifest.generators import GitHubSource
from sand.workitems.branches import WorkItemError
from sand.workitems.github import FIELDS_READ, github_items
from sand.workitems.rest import RestClient
from tests.rig.fakegithub import FakeGitHub, FakeGitHubServer

TOKEN = "ghp_fake-token-canary-4b1d"


@pytest.fixture
def github() -> Iterator[FakeGitHubServer]:
    fake = FakeGitHub(token=TOKEN, permissions={"maintainer": "maintain", "owner": "admin"})
    fake.permissions.update(reader="read", triager="triage")
    server = FakeGitHubServer(fake)
    yield server
    server.stop()


def source(github: FakeGitHubServer, **changes: object) -> GitHubSource:
    fields = {"repo": "app", "github": "acme/app", "label": "sand", "api": github.api}
    return GitHubSource.model_validate({**fields, **changes})


def poll(github: FakeGitHubServer, cache: Path, **changes: object):
    client = RestClient(github.api, TOKEN, cache)
    items, notes = github_items(source(github, **changes), client, generator="triage")
    return items, notes, client


def test_only_items_a_writer_authored_or_labelled_make_a_vm(github, tmp_path) -> None:
    fake = github.fake
    world = [  # (author, title, label, labeller)
        ("maintainer", "by a maintainer", "sand", "maintainer"),
        ("stranger", "by anyone, labelled by an owner", "sand", "owner"),
        ("stranger", "by anyone, labelled by a reader", "sand", "reader"),
        ("triager", "by a triager, self-labelled", "sand", "triager"),
        ("reader", "labelled otherwise", "other", "owner"),
        ("owner", "labelled, then closed", "sand", "owner"),
    ]
    for number, (author, title, label, labeller) in enumerate(world, start=1):
        fake.open_issue(number, author, title)
        fake.label(number, label, by=labeller)
    fake.close(6)
    items, notes, _ = poll(github, tmp_path)
    assert [(i.key, i.number, i.title) for i in items] == [
        ("acme/app#1", 1, "by a maintainer"),
        ("acme/app#2", 2, "by anyone, labelled by an owner"),
    ]
    assert items[0].url == "https://github.com/acme/app/issues/1" and not notes
    assert all(r.authorization == f"Bearer {TOKEN}" for r in fake.log)


def test_nothing_from_people_without_write_access(github, tmp_path) -> None:
    fake = github.fake
    for n, who in enumerate(["stranger", "reader", "triager", "someone"], start=1):
        fake.open_issue(n, who, "$(rm -rf ~)")
        fake.label(n, "sand", by=who)
    items, _, _ = poll(github, tmp_path)
    assert items == []


def test_an_unchanged_poll_is_one_conditional_request_answered_304(github, tmp_path) -> None:
    fake = github.fake
    fake.open_issue(1, "stranger")
    fake.label(1, "sand", by="owner")
    first, _, client = poll(github, tmp_path)
    assert client.sent == 4  # the listing, the author's and the labeller's rights, events
    spent = fake.remaining
    fake.log.clear()
    again, _, client = poll(github, tmp_path)
    assert again == first
    assert client.sent == 1 and [(r.status, r.conditional) for r in fake.log] == [(304, True)]
    assert fake.remaining == spent  # a 304 spends nothing
    fake.unlabel(1, "sand", by="owner")
    fake.log.clear()
    gone, _, _ = poll(github, tmp_path)
    assert gone == [] and fake.log[0].status == 200


def test_a_pull_request_gets_its_head_branch_when_it_is_in_the_repository(github, tmp_path) -> None:
    fake = github.fake
    fake.open_pull(7, "maintainer", head="fix/login")
    fake.label(7, "sand", by="maintainer")
    fake.open_pull(8, "owner", head="main", head_repo="fork/app")
    fake.label(8, "sand", by="owner")
    fake.open_issue(9, "owner")
    fake.label(9, "sand", by="owner")
    items, _, _ = poll(github, tmp_path, kind="pulls")
    assert [(i.number, i.branch) for i in items] == [(7, "fix/login"), (8, None)]
    issues, _, _ = poll(github, tmp_path / "other")
    assert [i.number for i in issues] == [9]


def test_a_secondary_limit_keeps_the_last_items_and_sends_nothing_until_it_lifts(
    github, tmp_path
) -> None:
    fake = github.fake
    fake.open_issue(1, "owner")
    fake.label(1, "sand", by="owner")
    first, _, _ = poll(github, tmp_path)
    fake.retry_after = 120
    kept, notes, _ = poll(github, tmp_path)
    assert kept == first
    (note,) = notes
    assert note.startswith("generator triage: GitHub's rate limit is reached: retry after 1")
    assert note.endswith("; the last poll's items stand")
    fake.log.clear()
    _, notes, client = poll(github, tmp_path)
    assert client.sent == 0 and fake.log == [] and notes  # held, unasked


def test_a_spent_primary_limit_with_nothing_kept_fails_the_poll(github, tmp_path) -> None:
    github.fake.remaining = 0
    with pytest.raises(WorkItemError) as info:
        poll(github, tmp_path)
    assert "generator triage: GitHub's rate limit is reached: retry after" in str(info.value)
    assert TOKEN not in str(info.value)


def test_a_token_goes_nowhere_but_https_or_this_host() -> None:
    with pytest.raises(WorkItemError, match="refusing to send a GitHub token"):
        RestClient("http://api.example.com", TOKEN, Path("/nonexistent"))


# --- the contract: every field sand reads, in the fake's answers as GitHub's description
# gives them (the fake is what the tests above ran against).

CONTRACT_TYPES = {
    "number": int,
    "title": str,
    "body": str,
    "html_url": str,
    "user.login": str,
    "pull_request": dict,
    "permission": str,
    "event": str,
    "label.name": str,
    "actor.login": str,
    "head.ref": str,
    "head.repo.full_name": str,
}


def dig(data, dotted: str):
    for key in dotted.split("."):
        data = data[key]
    return data


def test_contract_each_response_field_sand_reads() -> None:
    fake = FakeGitHub(permissions={"owner": "admin"})
    fake.open_pull(1, "owner", head="fix/x")
    fake.label(1, "sand", by="owner")
    answers = {
        "issues": fake.answer("/repos/acme/app/issues", {"labels": ["sand"]})[1][0],
        "permission": fake.answer("/repos/acme/app/collaborators/owner/permission", {})[1],
        "events": fake.answer("/repos/acme/app/issues/1/events", {})[1][0],
        "pull": fake.answer("/repos/acme/app/pulls/1", {})[1],
    }
    read = [f for fields in FIELDS_READ.values() for f in fields]
    assert sorted(read) == sorted(CONTRACT_TYPES)  # a field read is a field in the contract
    for endpoint, fields in FIELDS_READ.items():
        for name in fields:
            assert isinstance(dig(answers[endpoint], name), CONTRACT_TYPES[name]), name
    assert answers["permission"]["permission"] in ("admin", "write", "read", "none")


def test_a_manifest_sand_sync_follows_sends_the_hosts_token_to_github_only(tmp_path) -> None:
    from sand.manifest import parse_manifest
    from sand.workitems.gather import gather_items
    from tests.manifest.test_generators import GENERATED

    text = GENERATED.replace(
        "label: sand}", "label: sand, token: GH, api: 'https://evil.example/api'}"
    ).replace("repos:", "secrets:\n  GH: {}\nrepos:")
    with pytest.raises(WorkItemError, match=r"sends a token to https://api\.github\.com only"):
        gather_items(parse_manifest(text), tmp_path, from_repository=True)
