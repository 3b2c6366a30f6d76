"""The branch generator against a real git repository (``git init`` here, read over
file://) and fakepve: a VM per matching branch, its source shown in the plan, and when a
branch goes its VM is deleted through the same guards as any VM (issue 43, items 2-3)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from sand.desired.generated import WorkItem, item_vm_name
from tests.cli.helpers import Sand

GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "GIT_CONFIG_NOSYSTEM": "1",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=GIT_ENV, capture_output=True, text=True, check=True
    )
    return done.stdout


def repository(tmp_path: Path, branches: list[str]) -> Path:
    repo = tmp_path / "app"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "commit", "-q", "--allow-empty", "-m", "first")
    for branch in branches:
        git(repo, "branch", branch)
    return repo


def manifest(rig, repo: Path, **generator: object) -> dict[str, object]:
    data = rig.manifest([{"name": "keep", "memory": "1GiB"}])
    data["repos"] = {"app": {"url": f"file://{repo}"}}
    data["generators"] = {
        "work": {
            "max": 5,
            "branches": {"repo": "app", "match": "feature/*"},
            "vm": {"memory": "1GiB"},
            **generator,
        }
    }
    return data


def vm_of(branch: str) -> str:
    return item_vm_name("work", WorkItem(branch, branch=branch))


def names(rig) -> list[str]:
    return sorted(v.name for v in rig.vms())


@pytest.fixture
def sand(tmp_path) -> Sand:
    return Sand(tmp_path)


def test_a_vm_per_matching_branch_shown_with_its_source(sand, fakepve_server, tmp_path):
    rig = fakepve_server
    repo = repository(tmp_path, ["feature/a", "feature/b", "other"])
    sand.write(manifest(rig, repo))
    plan = sand.run("plan")
    assert plan.returncode == 0, plan.stdout + plan.stderr
    a, b = vm_of("feature/a"), vm_of("feature/b")
    assert a.startswith("work-feature-a--") and b.startswith("work-feature-b--")
    assert f'+ vm "{a}" (from generator work: feature/a) {{' in plan.stdout
    assert f'+ vm "{b}" (from generator work: feature/b) {{' in plan.stdout
    assert "other" not in plan.stdout and "Plan: 3 to add" in plan.stdout
    apply = sand.run("apply", "--auto-approve")
    assert apply.returncode == 0, apply.stdout + apply.stderr
    assert names(rig) == sorted(["keep", a, b])
    assert "No changes." in sand.run("plan").stdout  # the names are stable

    git(repo, "branch", "-D", "feature/a")
    plan = sand.run("plan", "--json")
    (gone,) = [c for c in json.loads(plan.stdout)["changes"] if c["action"] != "no-op"]
    assert gone["vm"] == a and "delete" in (gone["action"], gone["blocked_action"])
    assert gone["reasons"] == ["its work item is gone (generator work)"]
    # fakepve's guests hold no SSH to sweep: treated as holding work, as any VM.
    assert sand.run("apply", "--auto-approve", "--allow-data-loss").returncode == 0
    assert names(rig) == sorted(["keep", b])


@pytest.mark.sand_time_scale(0.01)  # the agent's silence is not the subject
def test_a_deleted_branch_does_not_delete_a_vm_that_may_hold_work(sand, fakepve_server, tmp_path):
    rig = fakepve_server
    repo = repository(tmp_path, ["feature/a"])
    sand.write(manifest(rig, repo))
    assert sand.run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms_named(vm_of("feature/a"))
    rig.stop_agent(vm.vmid)  # nothing to sweep: treated as holding work
    git(repo, "branch", "-D", "feature/a")
    plan = sand.run("plan")
    assert plan.returncode == 1
    assert "its work item is gone (generator work)" in plan.stdout
    assert "--allow-data-loss" in plan.stdout
    assert sand.run("apply", "--auto-approve").returncode == 1
    assert vm_of("feature/a") in names(rig)


def test_the_mass_delete_guard_counts_generated_vms(sand, fakepve_server, tmp_path):
    rig = fakepve_server
    repo = repository(tmp_path, ["feature/a", "feature/b", "feature/c"])
    sand.write(manifest(rig, repo))
    assert sand.run("apply", "--auto-approve").returncode == 0
    assert len(names(rig)) == 4
    for branch in ("feature/a", "feature/b", "feature/c"):
        git(repo, "branch", "-D", branch)
    refused = sand.run("apply", "--auto-approve", "--allow-data-loss")
    assert refused.returncode == 1 and "--allow-mass-delete" in refused.stdout + refused.stderr
    assert len(names(rig)) == 4
    done = sand.run("apply", "--auto-approve", "--allow-mass-delete", "--allow-data-loss")
    assert done.returncode == 0, done.stdout + done.stderr
    assert names(rig) == ["keep"]


def test_a_repository_that_cannot_be_read_plans_nothing(sand, fakepve_server, tmp_path):
    rig = fakepve_server
    repo = repository(tmp_path, ["feature/a"])
    sand.write(manifest(rig, repo))
    assert sand.run("apply", "--auto-approve").returncode == 0
    before = names(rig)
    (repo / ".git").rename(tmp_path / "moved")
    plan = sand.run("plan")
    assert plan.returncode == 1 and "Traceback" not in plan.stderr
    assert "generator work: cannot list the branches of file://" in plan.stderr
    assert sand.run("apply", "--auto-approve").returncode == 1
    assert names(rig) == before


GIT_TOKEN = "rig-git-token-canary-91c2"


def test_branches_over_https_with_the_repository_token(sand, fakepve_server, tmp_path):
    from fakepve.certs import make_cert

    from tests.rig.gitserver import GitServer

    rig = fakepve_server
    (tmp_path / "pki").mkdir()
    pki = make_cert(str(tmp_path / "pki"), hosts=("127.0.0.1",))[:2]
    with GitServer(GIT_TOKEN, host="127.0.0.1", tls=pki) as server:
        url = server.create_repo("app", {"README.md": "hi\n"})
        bare = server.repo_path("app")
        git(bare, "branch", "feature/https", "main")
        data = manifest(rig, tmp_path)
        data["secrets"] = {"GIT": {"from": {"env": "SAND_TEST_GIT"}}}
        data["repos"] = {"app": {"url": url, "token": "GIT"}}
        sand.write(data)
        env = {"SAND_TEST_GIT": GIT_TOKEN, "GIT_SSL_CAINFO": pki[0]}
        plan = sand.run("plan", env=env)
        assert plan.returncode == 0, plan.stdout + plan.stderr
        assert f'+ vm "{vm_of("feature/https")}" (from generator work: feature/https)' in (
            plan.stdout
        )
        assert any(ok for _, ok in server.request_log)  # the token was asked for and given
        refused = sand.run("plan", env={**env, "SAND_TEST_GIT": "wrong"})
        assert refused.returncode == 1 and "cannot list the branches" in refused.stderr
    assert GIT_TOKEN not in plan.stdout + plan.stderr
    for path in sand.state_dir.rglob("*"):
        assert not path.is_file() or GIT_TOKEN.encode() not in path.read_bytes(), path


def test_a_branch_pushed_after_a_plan_is_planned_the_next_time(sand, fakepve_server, tmp_path):
    """Work items are read from the world for every plan: a manifest with generators is
    never served from the desired-state cache, even when its first plan generated no VM."""
    rig = fakepve_server
    repo = repository(tmp_path, ["other"])
    sand.write(manifest(rig, repo))
    first = sand.run("plan")
    assert first.returncode == 0 and "Plan: 1 to add" in first.stdout, first.stdout
    git(repo, "branch", "feature/a")
    again = sand.run("plan")
    assert f'+ vm "{vm_of("feature/a")}" (from generator work: feature/a)' in again.stdout
