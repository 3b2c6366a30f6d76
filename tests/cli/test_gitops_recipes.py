"""The GitOps recipes in docs/ci/ run: each CI file is parsed as YAML and its shell
steps (GitHub's `run:`, GitLab's `before_script:` + `script:`) run with bash in a
temporary checkout against fakepve, one scenario a recipe: a pull request's plan
(posted as a comment to a local HTTP server standing in for the forge's API), the
merge's apply, a plan with nothing to do, the nightly drift report before and after a
change made outside of sand, and a plan that cannot see its backend.

What the test does not run: `uses:` actions (the temporary directory is the checkout;
Python is this one) and `pip install` (sand is already installed: a `sand` on PATH
runs this worktree's). Each job starts with an empty state directory, as a fresh CI
runner does. The examples in manifests/ go through `sand validate`.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CI = ROOT / "docs" / "ci"
REPO = "acme/fleet"
PR = "7"


# --- the forge's API: records what the recipe posts ---------------------------------


@dataclass
class Post:
    path: str
    headers: dict[str, str]
    body: bytes

    def text(self) -> str:
        if self.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            return urllib.parse.parse_qs(self.body.decode())["body"][0]
        return str(json.loads(self.body)["body"])


@dataclass
class Forge:
    url: str
    posts: list[Post] = field(default_factory=list)

    def take(self) -> list[Post]:
        posts, self.posts[:] = list(self.posts), []
        return posts


@pytest.fixture
def forge() -> Iterator[Forge]:
    recorded: list[Post] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length", 0))
            headers = {k.lower(): v for k, v in self.headers.items()}
            recorded.append(Post(self.path, headers, self.rfile.read(length)))
            self.send_response(201)
            self.send_header("content-type", "application/json")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Forge(f"http://127.0.0.1:{server.server_address[1]}", recorded)
    finally:
        server.shutdown()
        server.server_close()


# --- a checkout holding sand.yaml, and a runner's environment ------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Checkout:
    path: Path
    rig: Any
    env: dict[str, str]
    jobs: int = 0

    def write(self, vms: list[dict[str, Any]], **backend: Any) -> None:
        # The paths the recipes write the credentials to (as manifests/proxmox-team.yaml).
        fields = self.rig.backend_fields(
            token_file=".sand/pve.token", identity=".sand/id_ed25519", **backend
        )
        manifest = {
            "apiVersion": "sand/v1",
            "project": "gitops",
            "backends": {"pve": fields},
            "defaults": {"provision": False},
            "vms": vms,
        }
        (self.path / "sand.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))

    def fresh_env(self, extra: dict[str, str]) -> dict[str, str]:
        self.jobs += 1
        return {**self.env, "SAND_STATE_DIR": str(self.path.parent / f"state-{self.jobs}"), **extra}


@pytest.fixture
def checkout(tmp_path: Path, fakepve_server: Any) -> Checkout:
    repo = tmp_path / "repo"
    repo.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    sand = bin_dir / "sand"
    sand.write_text(f'#!/bin/sh\nexec {sys.executable} -m sand "$@"\n')
    sand.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "HOME": str(tmp_path / "home"),
        "LANG": "C.UTF-8",
        # What the CI secret store holds.
        "SAND_PVE_TOKEN": fakepve_server.token_file.read_text().strip(),
        "SAND_SSH_KEY": fakepve_server.identity.read_text().strip(),
    }
    c = Checkout(repo, fakepve_server, env)
    c.write([{"name": "web-1"}])
    return c


def token_secret(checkout: Checkout) -> str:
    return checkout.env["SAND_PVE_TOKEN"].split("=", 1)[1]


def bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # As both runners run a step: bash, errexit and pipefail.
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


# --- GitHub Actions -----------------------------------------------------------------


def github() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CI / "github-actions.yml").read_text())
    return data


def resolve(env: dict[str, Any], given: dict[str, str]) -> dict[str, str]:
    """A step's env with each `${{ ... }}` replaced by what the runner would give it."""
    out = {}
    for key, value in env.items():
        if "${{" in str(value):
            assert key in given, f"the recipe expects {key} from {value}; the test gives it none"
            out[key] = given[key]
        else:
            out[key] = str(value)
    return out


@dataclass
class JobRun:
    steps: dict[str, subprocess.CompletedProcess[str]]
    outputs: str
    summary: str

    @property
    def ok(self) -> bool:
        return all(p.returncode == 0 for p in self.steps.values())

    def log(self) -> str:
        return "\n".join(
            f"--- {n} ({p.returncode})\n{p.stdout}{p.stderr}" for n, p in self.steps.items()
        )


def run_github_job(name: str, checkout: Checkout, forge: Forge) -> JobRun:
    workflow = github()
    job = workflow["jobs"][name]
    files = checkout.path.parent
    outputs, summary = files / f"{name}.output", files / f"{name}.summary"
    outputs.write_text("")
    summary.write_text("")
    runner = {
        "GITHUB_OUTPUT": str(outputs),
        "GITHUB_STEP_SUMMARY": str(summary),
        "GITHUB_API_URL": forge.url,
        "GITHUB_REPOSITORY": REPO,
    }
    given = {
        "SAND_PVE_TOKEN": checkout.env["SAND_PVE_TOKEN"],
        "SAND_SSH_KEY": checkout.env["SAND_SSH_KEY"],
        "GH_TOKEN": "ghs_testtoken",
        "PR_NUMBER": PR,
    }
    env = checkout.fresh_env(
        {**runner, **resolve(workflow.get("env", {}), given), **resolve(job.get("env", {}), given)}
    )
    ran: dict[str, subprocess.CompletedProcess[str]] = {}
    ids: set[str] = set()
    failed = False
    for step in job["steps"]:
        if "uses" in step or "pip install" in step["run"]:
            continue
        if not should_run(step.get("if", ""), failed, ids):
            continue
        proc = bash(step["run"], checkout.path, {**env, **resolve(step.get("env", {}), given)})
        ran[step["name"]] = proc
        ids.add(step.get("id", ""))
        failed = failed or proc.returncode != 0
    return JobRun(ran, outputs.read_text(), summary.read_text())


def should_run(condition: str, failed: bool, ran: set[str]) -> bool:
    """The two `if:` forms the recipe uses: none (run while all succeed), and
    `always() && steps.X.outcome != 'skipped'`."""
    if not condition:
        return not failed
    match = re.fullmatch(r"always\(\) && steps\.(\w+)\.outcome != 'skipped'", condition)
    assert match, f"the test does not know the condition {condition!r}"
    return match.group(1) in ran


def test_the_github_workflow_is_wired_as_documented():
    wf = github()
    triggers = wf.get("on", wf.get(True))  # YAML 1.1 reads a bare `on` as true
    assert {"pull_request", "push", "schedule"} <= set(triggers)
    jobs = wf["jobs"]
    assert "pull_request" in jobs["plan"]["if"] and "push" in jobs["apply"]["if"]
    assert "schedule" in jobs["drift"]["if"]
    assert jobs["apply"]["concurrency"] == {"group": "sand-apply", "cancel-in-progress": False}
    plan = next(s for s in jobs["plan"]["steps"] if s.get("id") == "plan")["run"]
    assert "--detailed-exitcode" in plan
    drift = next(s for s in jobs["drift"]["steps"] if s.get("name") == "Drift report")["run"]
    assert "--refresh-only --detailed-exitcode" in drift


def test_the_github_recipe_runs_against_fakepve(checkout, forge):
    rig = checkout.rig
    # A pull request adds web-1: plan exits 2, the step passes, the plan is posted.
    run = run_github_job("plan", checkout, forge)
    assert run.ok, run.log()
    assert set(run.steps) == {"Credentials", "Validate", "Plan", "Post the plan"}
    assert "exitcode=2" in run.outputs
    (post,) = forge.take()
    assert post.path == f"/repos/{REPO}/issues/{PR}/comments"
    assert post.headers["authorization"] == "Bearer ghs_testtoken"
    assert "Changes pending" in post.text() and "Plan: 1 to add" in post.text()
    assert rig.vms() == []  # a plan changes nothing

    # The merge: apply, on a runner with no state of its own.
    run = run_github_job("apply", checkout, forge)
    assert run.ok, run.log()
    assert sorted(vm.name for vm in rig.vms()) == ["web-1"]
    assert forge.take() == []

    # Another pull request that changes nothing: exit 0, said so in the comment.
    run = run_github_job("plan", checkout, forge)
    assert run.ok and "exitcode=0" in run.outputs, run.log()
    assert "No changes" in forge.take()[0].text()

    # Nightly: no drift, then a change made outside of sand (exit 2, the job fails).
    run = run_github_job("drift", checkout, forge)
    assert run.ok, run.log()
    vmid = rig.vms_named("web-1")[0].vmid
    rig.run(lambda: rig.pve.vm(vmid).config.__setitem__("cores", 6))
    run = run_github_job("drift", checkout, forge)
    assert run.steps["Drift report"].returncode == 2, run.log()
    assert "web-1 (pve) has changed outside of sand" in run.summary
    assert forge.take() == []

    # A plan that cannot see its backend fails the job, and still says so on the PR.
    checkout.write([{"name": "web-1"}], port=closed_port())
    run = run_github_job("plan", checkout, forge)
    assert run.steps["Plan"].returncode == 1, run.log()
    assert run.steps["Post the plan"].returncode == 0
    assert "The plan failed (exit 1)" in forge.take()[0].text()
    assert all(token_secret(checkout) not in p.stdout + p.stderr for p in run.steps.values())


# --- GitLab CI ----------------------------------------------------------------------


def gitlab() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((CI / "gitlab-ci.yml").read_text())
    return data


def run_gitlab_job(name: str, checkout: Checkout, forge: Forge) -> subprocess.CompletedProcess[str]:
    pipeline = gitlab()
    job = pipeline[name]
    lines = [*pipeline["default"]["before_script"], *job["script"]]
    script = "\n".join(line for line in lines if "pip install" not in line)
    env = checkout.fresh_env(
        {
            **{k: str(v) for k, v in pipeline["variables"].items()},
            "CI_API_V4_URL": f"{forge.url}/api/v4",
            "CI_PROJECT_ID": "42",
            "CI_MERGE_REQUEST_IID": PR,
            "SAND_GITLAB_TOKEN": "glpat-testtoken",
        }
    )
    return bash(script, checkout.path, env)


def test_the_gitlab_pipeline_is_wired_as_documented():
    p = gitlab()
    assert p["plan"]["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "merge_request_event"'}]
    assert "push" in p["apply"]["rules"][0]["if"]
    assert p["apply"]["resource_group"] == "sand-apply"
    assert p["drift"]["rules"] == [{"if": '$CI_PIPELINE_SOURCE == "schedule"'}]
    assert "--detailed-exitcode" in p["plan"]["script"][0]
    assert "--refresh-only --detailed-exitcode" in p["drift"]["script"][0]


def test_the_gitlab_recipe_runs_against_fakepve(checkout, forge):
    rig = checkout.rig
    proc = run_gitlab_job("validate", checkout, forge)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    proc = run_gitlab_job("plan", checkout, forge)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (note,) = forge.take()
    assert note.path == f"/api/v4/projects/42/merge_requests/{PR}/notes"
    assert note.headers["private-token"] == "glpat-testtoken"
    assert "Changes pending" in note.text() and "Plan: 1 to add" in note.text()
    assert rig.vms() == []

    proc = run_gitlab_job("apply", checkout, forge)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(vm.name for vm in rig.vms()) == ["web-1"]

    proc = run_gitlab_job("plan", checkout, forge)
    assert proc.returncode == 0 and "No changes" in forge.take()[0].text()

    assert run_gitlab_job("drift", checkout, forge).returncode == 0
    vmid = rig.vms_named("web-1")[0].vmid
    rig.run(lambda: rig.pve.vm(vmid).config.__setitem__("cores", 6))
    proc = run_gitlab_job("drift", checkout, forge)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "has changed outside of sand" in (checkout.path / "drift.txt").read_text()

    checkout.write([{"name": "web-1"}], port=closed_port())
    proc = run_gitlab_job("plan", checkout, forge)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "The plan failed (exit 1)" in forge.take()[0].text()
    assert token_secret(checkout) not in proc.stdout + proc.stderr


# --- the worked examples ------------------------------------------------------------

EXAMPLES = sorted((ROOT / "manifests").glob("*.yaml"))


def test_there_are_laptop_team_and_mixed_examples():
    names = {p.name for p in EXAMPLES}
    assert {"laptop-lima.yaml", "proxmox-team.yaml", "example.yaml"} <= names
    types = {
        p.name: {b["type"] for b in yaml.safe_load(p.read_text())["backends"].values()}
        for p in EXAMPLES
    }
    assert types["laptop-lima.yaml"] == {"lima"}
    assert types["proxmox-team.yaml"] == {"proxmox"}
    assert types["example.yaml"] == {"lima", "proxmox"}


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_every_example_passes_sand_validate(path):
    proc = subprocess.run(
        [sys.executable, "-m", "sand", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"{path}: valid")
