"""`plan --json`, `status --json` and `apply --json` as a pipeline reads them: the real
command line against fakepve, each document validated against its JSON Schema under
sand/schemas/ (draft-07), so the schemas and docs/output.md describe what sand prints."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.cli.helpers import Sand
from tests.machine_schemas import SCHEMAS, validate


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def sand(tmp_path, fakepve_server):
    s = Sand(tmp_path)
    s.write(fakepve_server.manifest([{"name": "web-1"}, {"name": "web-2", "memory": "2GiB"}]))
    return s


def run_json(sand: Sand, *args: str, expect: int) -> dict[str, Any]:
    proc = sand.run(*args)
    assert proc.returncode == expect, proc.stdout + proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    assert data["format_version"] == "2"
    return data


def run_json_lines(sand: Sand, *args: str, expect: int) -> list[dict[str, Any]]:
    """``apply --json``: one JSON object per line, each valid against its schema."""
    proc = sand.run(*args)
    assert proc.returncode == expect, proc.stdout + proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    for line in lines:
        assert line["format_version"] == "2"
        validate("apply", line)
    return lines


@pytest.mark.sand_time_scale(0.01)  # the guard's SSH attempts are not the subject
def test_every_machine_document_matches_its_schema_through_a_fleet_life(sand, fakepve_server):
    plan = run_json(sand, "plan", "--json", "--detailed-exitcode", expect=2)
    validate("plan", plan)
    # A create lists every field the VM gets, as the text plan does.
    web2 = next(c for c in plan["changes"] if c["vm"] == "web-2")
    assert web2["action"] == "create"
    assert web2["desired"]["memory"] == 2 * 2**30
    assert {"image", "cpus", "memory", "disk", "state"} <= set(web2["desired"])
    validate("status", run_json(sand, "status", "--json", expect=0))

    applied = run_json_lines(sand, "apply", "--auto-approve", "--json", expect=0)
    assert applied[0]["type"] == "plan" and applied[0]["plan"]["summary"]["add"] == 2
    outcome = applied[-1]
    assert outcome["type"] == "outcome" and outcome["ok"] and outcome["converged"]
    assert sorted(r["vm"] for r in outcome["results"]) == ["web-1", "web-2"]
    assert {e["vm"] for e in applied if e["type"] == "step" and e["phase"] == "done"} == {
        "web-1",
        "web-2",
    }
    assert sorted(vm.name for vm in fakepve_server.vms()) == ["web-1", "web-2"]

    validate("status", run_json(sand, "status", "--json", expect=0))
    nothing = run_json_lines(sand, "apply", "--auto-approve", "--json", expect=0)
    assert [e["type"] for e in nothing] == ["plan", "outcome"]
    assert nothing[-1]["results"] == [] and nothing[-1]["ok"] is True

    # An update and a blocked delete: web-1 grows, web-2 leaves the manifest (and
    # nobody can look for unpushed work in it: the guard blocks, exit 1).
    sand.write(fakepve_server.manifest([{"name": "web-1", "cpus": 4}]))
    plan = run_json(sand, "plan", "--json", expect=1)
    validate("plan", plan)
    changes = {c["vm"]: c for c in plan["changes"]}
    assert changes["web-1"]["action"] == "update"
    assert [f["field"] for f in changes["web-1"]["fields"]] == ["cpus"]
    assert changes["web-2"]["action"] == "blocked"
    assert changes["web-2"]["blocked_action"] == "delete"
    assert changes["web-2"]["blockers"] and changes["web-2"]["desired"] is None
    validate("plan", run_json(sand, "plan", "--json", "--refresh-only", expect=0))


def test_an_unobservable_backend_still_prints_documents_that_match(tmp_path, fakepve_server):
    sand = Sand(tmp_path)
    sand.write(fakepve_server.manifest([{"name": "web-1"}], port=closed_port()))
    plan = run_json(sand, "plan", "--json", expect=1)
    validate("plan", plan)
    assert list(plan["unknown_backends"]) == ["pve"]
    status = run_json(sand, "status", "--json", expect=1)
    validate("status", status)
    assert status["vms"][0]["conditions"]["Synced"] == "Unknown"


def test_the_schemas_reject_what_sand_never_prints():
    # A schema that accepts anything could not catch a renamed key.
    validate("plan", {**minimal_plan()})
    with pytest.raises(AssertionError):
        validate("plan", {**minimal_plan(), "format_version": "1"})
    with pytest.raises(AssertionError):
        validate("plan", {**minimal_plan(), "chnages": []})
    bad = minimal_plan()
    bad["changes"] = [{"vm": "a"}]
    with pytest.raises(AssertionError):
        validate("plan", bad)
    # An apply line is exactly one of its kinds.
    step = {
        "format_version": "2",
        "type": "step",
        "vm": "a",
        "backend": "pve",
        "phase": "creating",
        "step": "creating",
        "elapsed": 0.1,
        "at": "2026-12-03T15:00:00.000+00:00",
    }
    validate("apply", step)
    for wrong in ({"type": "outcome"}, {"phase": "napping"}, {"limit": -1}, {"elapsed": "1s"}):
        with pytest.raises(AssertionError):
            validate("apply", {**step, **wrong})
    with pytest.raises(AssertionError):
        validate("apply", {**step, "retry": {"layer": "proxmox", "reason": "PVE 503"}})


def minimal_plan() -> dict[str, Any]:
    return {
        "format_version": "2",
        "project": "demo",
        "refresh_only": False,
        "observed_fingerprint": "0" * 16,
        "changes": [],
        "summary": {"add": 0, "finish": 0, "change": 0, "destroy": 0, "has_changes": False},
        "unknown_backends": {},
        "warnings": [],
        "recovery": [],
    }


def test_docs_output_names_every_key_the_schemas_list():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "output.md").read_text()
    missing = []
    for name in ("plan", "status", "apply", "doctor"):
        schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
        nodes = [schema, *schema.get("definitions", {}).values()]
        for node in nodes:
            for key in node.get("properties", {}):
                if f"`{key}`" not in doc and f"`{key}[]`" not in doc:
                    missing.append(f"{name}: {key}")
    assert not missing, missing
