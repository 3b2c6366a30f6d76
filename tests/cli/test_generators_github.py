"""The GitHub generator end to end: label an issue on the fake GitHub (real HTTP) and its
VM appears in the plan with its source and on fakepve after apply; remove the label and
its VM is planned for deletion; the token is a secret named in the manifest, seen by
nothing but the API (issue 43, items 3 and 5)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.cli.helpers import Sand
from tests.machine_schemas import validate
from tests.rig.fakegithub import FakeGitHub, FakeGitHubServer

TOKEN = "ghp_cli-canary-7f3e"


@pytest.fixture
def github() -> Iterator[FakeGitHubServer]:
    server = FakeGitHubServer(FakeGitHub(token=TOKEN, permissions={"alice": "write"}))
    yield server
    server.stop()


def manifest(rig, github: FakeGitHubServer, max_items: int = 10) -> dict[str, object]:
    data = rig.manifest([])
    data["secrets"] = {"GH": {"from": {"env": "SAND_TEST_GH"}}}
    data["repos"] = {"app": {"url": "https://github.com/acme/app.git"}}
    data["generators"] = {
        "triage": {
            "max": max_items,
            "prefix": "issue",
            "github": {
                "repo": "app",
                "github": "acme/app",
                "label": "sand",
                "token": "GH",
                "api": github.api,
            },
            "vm": {"memory": "1GiB"},
        }
    }
    return data


def test_label_an_issue_and_its_vm_appears_then_goes_with_the_label(
    tmp_path, fakepve_server, github
) -> None:
    rig, fake, sand = fakepve_server, github.fake, Sand(tmp_path)
    env = {"SAND_TEST_GH": TOKEN}
    sand.write(manifest(rig, github))
    fake.open_issue(123, "mallory", "Fix the login\x1b[2J")
    fake.label(123, "sand", by="alice")
    fake.open_issue(124, "mallory", "mine")
    fake.label(124, "sand", by="mallory")
    plan = sand.run("plan", env=env)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert '+ vm "issue-123" (from generator triage: acme/app#123 "Fix the login") {' in plan.stdout
    assert "issue-124" not in plan.stdout and "Plan: 1 to add" in plan.stdout
    document = json.loads(sand.run("plan", "--json", env=env).stdout)
    validate("plan", document)
    (made,) = document["changes"]
    assert made["generated"] == {
        "generator": "triage",
        "item": "acme/app#123",
        "title": "Fix the login",
    }
    assert sand.run("apply", "--auto-approve", env=env).returncode == 0
    assert [v.name for v in rig.vms()] == ["issue-123"]
    fake.log.clear()
    assert "No changes." in sand.run("plan", env=env).stdout
    assert [(r.status, r.conditional) for r in fake.log] == [(304, True)]

    fake.unlabel(123, "sand", by="alice")
    plan = sand.run("plan", "--json", env=env)
    (gone,) = json.loads(plan.stdout)["changes"]
    assert gone["vm"] == "issue-123" and "delete" in (gone["action"], gone["blocked_action"])
    assert gone["reasons"] == ["its work item is gone (generator triage)"]
    # The last VM of the backend: the mass-delete guard counts generated VMs too.
    held = sand.run("apply", "--auto-approve", "--allow-data-loss", env=env)
    assert held.returncode == 1 and "--allow-mass-delete" in held.stdout + held.stderr
    assert [v.name for v in rig.vms()] == ["issue-123"]
    flags = ("--allow-data-loss", "--allow-mass-delete")
    done = sand.run("apply", "--auto-approve", *flags, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert rig.vms() == []
    for path in sand.state_dir.rglob("*"):
        assert not path.is_file() or TOKEN.encode() not in path.read_bytes(), path


def test_a_label_flood_is_held_at_max_said_once(tmp_path, fakepve_server, github) -> None:
    rig, fake, sand = fakepve_server, github.fake, Sand(tmp_path)
    sand.write(manifest(rig, github, max_items=3))
    for n in range(1, 41):
        fake.open_issue(n, "alice")
        fake.label(n, "sand", by="alice")
    plan = sand.run("plan", env={"SAND_TEST_GH": TOKEN})
    assert plan.returncode == 0, plan.stderr
    assert "Plan: 3 to add" in plan.stdout
    flood = [x for x in plan.stdout.splitlines() if "held at max" in x]
    assert flood == [
        "Warning: generator triage: 40 work items, held at max 3 (the first 3 in order; the "
        "rest wait)"
    ]
