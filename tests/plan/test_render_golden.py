"""The plan's text and JSON renderings, frozen: a refactor of the plan's records must
not change a word a person or a CI pipeline reads. Regenerate on purpose with
``SAND_UPDATE_GOLDEN=1``."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from sand.observed import Observation
from sand.plan import Blocker, make_plan
from sand.plan.gates import block
from sand.plan.render import plan_to_json, render_text
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired, stale_marker

GOLDEN = Path(__file__).parent / "golden"
FLEET = (
    MANIFEST
    + """\
  - name: d
    memory: 4GiB
  - name: e
  - name: f
"""
)


def every_kind_of_change():
    state = desired(FLEET)
    obs = converged(state)
    pve = {vm.name: vm for vm in obs["pve"].vms}
    a = stale_marker(pve["a"], guest_fingerprint="older-bundle")  # reprovision
    b = replace(stale_marker(pve["b"]), memory=8 * 2**30)  # memory 8 → 16 GiB, restart
    assert pve["d"].marker is not None
    d = replace(pve["d"], marker=replace(pve["d"].marker, secrets="1-" + "0" * 20, secrets_at=1))
    e = stale_marker(pve["e"], image="debian-11")  # image → replace
    f = stale_marker(pve["f"], guest_fingerprint="older-bundle")  # reprovision, blocked
    gone = replace(pve["a"], name="old", identity="150")  # not in the manifest: delete
    gone = replace(gone, marker=replace(gone.marker, name="old", identity="150"))
    obs["pve"] = Observation("pve", (a, b, d, e, f, gone))
    obs["laptop"] = Observation("laptop", ())  # c is created
    plan = make_plan(state, obs, POLICIES, secret_stamps={"d": "1-" + "1" * 20})
    changes = tuple(
        block(ch, (Blocker("template 'x' not found", "sand.yaml:9:5"),)) if ch.vm == "f" else ch
        for ch in plan.changes
    )
    return replace(plan, changes=changes)


def check(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SAND_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} changed; diff it against {path}"


def test_the_text_plan_keeps_its_words():
    check("plan.txt", render_text(every_kind_of_change()))


def test_the_json_plan_keeps_its_words():
    data = plan_to_json(every_kind_of_change())
    for c in data["changes"]:
        c.pop("guest", None)  # added with the guest action; every other key as before
    # A digest of the observations: it moves with every field a VM gains, and is
    # tested where it matters (a saved plan refuses to run on a changed fleet).
    assert len(data["observed_fingerprint"]) >= 16
    data["observed_fingerprint"] = "<digest>"
    check("plan.json", json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def test_the_json_status_keeps_its_words():
    from sand.survey.status import StatusReport, _row

    plan = every_kind_of_change()
    from sand.backends.lease import HELD, LeaseHolder, LeaseRecord

    rows = [_row(c, {"at": 1700000000.0}, None) for c in plan.changes]
    holder = LeaseHolder("ci-runner-3", 4121, "3f2a9c41d0e7" * 3, "sync", nonce="n")
    lease = LeaseRecord("demo", holder, HELD, 7, 1700000000.0, 1700000060.0, 60.0)
    report = StatusReport(
        rows, {"far": "connection refused"}, [lease.to_status("near", now=1700000010.0)]
    )
    check("status.json", json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n")


def test_the_golden_documents_match_their_schemas():
    from tests.machine_schemas import validate

    validate("plan", json.loads(json.dumps(plan_to_json(every_kind_of_change()), default=str)))
    validate("status", json.loads((GOLDEN / "status.json").read_text()))


def idle_fleet():
    """a hibernates for idle, c (Lima) stops for idle, b is asleep and reprovisioned."""
    from sand.agentstate import AgentReport, AgentSession, GuestPresence
    from sand.plan.idle import Asleep

    text = MANIFEST.replace("  cpus: 2\n", "  cpus: 2\n  idle: {after: 2h, keepMemory: true}\n")
    state = desired(text)
    obs = converged(state)
    pve = {vm.name: vm for vm in obs["pve"].vms}
    asleep_b = replace(
        stale_marker(pve["b"], guest_fingerprint="older-bundle"),
        power="stopped",
        lock="suspended",
        hibernated=True,
    )
    obs["pve"] = Observation("pve", (pve["a"], asleep_b))
    done = AgentReport((AgentSession("claude", "s1", "done", 1960, "/home/claude/src"),))
    presence = {"a": GuestPresence(10000, 0, 1500, 0, done), "c": GuestPresence(10000, 0, 200, 0)}
    since = 1700000000.0
    return make_plan(
        state,
        obs,
        POLICIES,
        presence=presence,
        asleep={"b": Asleep("suspended", since, "idle", "101")},
    )


def test_the_idle_plan_keeps_its_words(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    import time

    time.tzset()
    try:
        check("plan_idle.txt", render_text(idle_fleet()))
    finally:
        monkeypatch.undo()
        time.tzset()
    data = json.loads(json.dumps(plan_to_json(idle_fleet()), default=str))
    from tests.machine_schemas import validate

    validate("plan", data)


def test_a_saved_plan_to_sleep_holds_while_only_the_idle_time_grew():
    from sand.survey.planfile import _comparable

    saved = plan_to_json(idle_fleet())["changes"]
    later = json.loads(json.dumps(saved))
    for change in later:
        if "sleep" in change:
            change["sleep"]["idle_seconds"] += 120
            grown = change["sleep"]["why"].replace("idle 2h", "idle 2h2m ")
            change["reasons"] = [
                grown if r == change["sleep"]["why"] else r for r in change["reasons"]
            ]
            change["sleep"]["why"] = grown
    assert _comparable(later) == _comparable(saved)
    later[0]["sleep"]["how"] = "stopped"
    assert _comparable(later) != _comparable(saved)


def test_the_text_plan_of_a_fork_keeps_its_words():
    from tests.plan.test_fork_declared import FORKED, FORKING

    state = desired(FORKED)
    obs = converged(state)
    obs["pve"] = Observation("pve", tuple(v for v in obs["pve"].vms if v.name != "try-1"))
    check("plan-fork.txt", render_text(make_plan(state, obs, FORKING)))
