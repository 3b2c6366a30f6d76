"""``expires:``: what the manifest accepts (and where it says no), and what the planner
makes of a VM past its time — from records only, the clock passed in."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sand.errors import ManifestError, PlanRefused
from sand.manifest import parse_manifest
from sand.manifest.expiry import canonical, parse_expiry
from sand.observed import Observation
from sand.plan import Action, make_plan
from sand.plan.render import plan_to_json, render_text
from sand.plan.targeting import with_replacements
from sand.state.expired import ExpiredVM
from tests.plan.helpers import MANIFEST, POLICIES, converged, desired

DAY = 86400.0
T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
PAST = "2027-01-01"
PAST_AT = 1_798_761_600.0  # its midnight, UTC


def with_expiry(value: str, vm: str = "a", defaults: str = "") -> str:
    text = MANIFEST.replace(f"  - name: {vm}\n", f"  - name: {vm}\n    expires: {value}\n", 1)
    return text.replace("defaults:\n", f"defaults:\n{defaults}", 1) if defaults else text


def created(obs, vm: str, at: float) -> dict[str, Observation]:
    """``obs`` with ``vm``'s marker recording it was made at ``at``."""
    out = dict(obs)
    for name, o in obs.items():
        vms = tuple(
            replace(v, marker=replace(v.marker, created_at=int(at))) if v.name == vm else v
            for v in o.vms
        )
        out[name] = Observation(name, vms)
    return out


def without(obs, vm: str) -> dict[str, Observation]:
    return {n: Observation(n, tuple(v for v in o.vms if v.name != vm)) for n, o in obs.items()}


def by_vm(plan):
    return {c.vm: c for c in plan.changes}


# --- the manifest ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("written", "spelt"),
    [
        ("2027-01-01", "2027-01-01T00:00:00Z"),  # YAML reads it as a date
        ("'2027-01-01'", "2027-01-01T00:00:00Z"),
        ("2027-01-01T18:30:00Z", "2027-01-01T18:30:00Z"),  # and this as a timestamp
        ("2027-01-01T18:30:00+02:00", "2027-01-01T16:30:00Z"),
        ("'2027-01-01T18:30'", "2027-01-01T18:30:00Z"),  # no zone: UTC
        ("2027-01-01 18:30:00", "2027-01-01T18:30:00Z"),
        ("90m", "90m"),
        ("8h", "8h"),
        ("3d", "3d"),
        ("never", "never"),
    ],
)
def test_accepted_forms_have_one_spelling(written: str, spelt: str) -> None:
    manifest = parse_manifest(with_expiry(written))
    assert manifest.vms[0].expires == spelt


@pytest.mark.parametrize(
    ("written", "message"),
    [
        ("tomorrow", "'tomorrow' is not a time: write an ISO 8601 date"),
        ("8", "8 has no unit"),
        ("8w", "'8w' is not a time"),
        ("0h", "is no time at all"),
        ("99999d", "longer than ten years"),
        ("'2027-02-30'", "not a valid ISO 8601 date"),
        ("1969-07-20", "before 1970"),
    ],
)
def test_a_bad_expiry_is_a_located_error(written: str, message: str) -> None:
    text = with_expiry(written)
    row = next(i for i, line in enumerate(text.splitlines(), 1) if "expires:" in line)
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    (problem,) = info.value.problems
    assert str(problem).startswith(f"m.yaml:{row}:14: vms[0].expires: "), str(problem)
    assert message in str(problem)


def test_a_vm_takes_the_default_unless_it_says_never() -> None:
    text = with_expiry("never", defaults="  expires: 3d\n")
    state = desired(text)
    expiries = {vm.name: vm.expires for vm in state.vms}
    assert expiries["a"] is None and expiries["b"] == parse_expiry("3d")
    assert expiries["b"] is not None and expiries["b"].after == 3 * 86400


def test_the_expiry_is_in_neither_fingerprint() -> None:
    plain, lapsing = desired(), desired(with_expiry("8h"))
    assert plain.vms[0].fingerprint == lapsing.vms[0].fingerprint
    assert plain.vms[0].guest_fingerprint == lapsing.vms[0].guest_fingerprint
    assert canonical("8h") == "8h"


# --- the planner -------------------------------------------------------------------------


def test_a_vm_past_its_time_is_deleted():
    state = desired(with_expiry(PAST))
    plan = make_plan(state, converged(state), POLICIES, now=T0)
    a = by_vm(plan)["a"]
    assert a.action is Action.DELETE and a.reasons == ("expired at 2027-01-01T00:00:00Z",)
    assert a.expired_at == PAST_AT and a.observed is not None
    assert plan.counts() == (0, 0, 1)
    assert "# a (pve, 100) will be destroyed\n  #   expired at 2027-01-01T00:00:00Z" in render_text(
        plan
    )
    before = make_plan(state, converged(state), POLICIES, now=PAST_AT - 1)
    assert by_vm(before)["a"].action is Action.NOOP and not before.has_changes


def test_an_expired_vm_is_not_created_again():
    state = desired(with_expiry(PAST))
    plan = make_plan(state, without(converged(state), "a"), POLICIES, now=T0)
    a = by_vm(plan)["a"]
    assert a.action is Action.NOOP and not a.acts
    assert a.reasons == ("expired at 2027-01-01T00:00:00Z, not created",)
    assert any(
        "a (pve) expired at 2027-01-01T00:00:00Z and is not created" in w for w in plan.warnings
    )
    assert not plan.has_changes
    assert plan_to_json(plan)["changes"][0]["action"] == "no-op"


def test_a_duration_counts_from_the_creation_the_vm_records():
    state = desired(with_expiry("8h"))
    young = created(converged(state), "a", T0 - 7 * 3600)
    assert by_vm(make_plan(state, young, POLICIES, now=T0))["a"].action is Action.NOOP
    old = created(converged(state), "a", T0 - 9 * 3600)
    a = by_vm(make_plan(state, old, POLICIES, now=T0))["a"]
    assert a.action is Action.DELETE and a.expired_at == T0 - 3600


def test_a_duration_without_a_creation_time_warns_and_deletes_nothing():
    state = desired(with_expiry("8h"))
    plan = make_plan(state, converged(state), POLICIES, now=T0)
    assert by_vm(plan)["a"].action is Action.NOOP and not plan.has_changes
    (note,) = [w for w in plan.warnings if "expires: 8h" in w]
    assert "does not record" in note and "not deleted" in note


def test_a_duration_expired_here_stays_absent_while_the_expiry_is_the_same():
    state = desired(with_expiry("8h"))
    gone = without(converged(state), "a")
    record = {("pve", "a"): ExpiredVM("pve", "a", "8h", T0 - DAY)}
    kept = by_vm(make_plan(state, gone, POLICIES, now=T0, expired=record))["a"]
    assert kept.action is Action.NOOP and kept.reasons[0].endswith(", not created")
    # A new expires: (or none), or no record of the expiry: it is made again.
    other = desired(with_expiry("9h"))
    assert by_vm(make_plan(other, gone, POLICIES, now=T0, expired=record))["a"].action is (
        Action.CREATE
    )
    assert by_vm(make_plan(state, gone, POLICIES, now=T0))["a"].action is Action.CREATE


def test_a_protected_or_locked_vm_past_its_time_is_blocked():
    state = desired(with_expiry(PAST))
    obs = converged(state)
    protected = {
        **obs,
        "pve": Observation(
            "pve", tuple(replace(v, protect=True) if v.name == "a" else v for v in obs["pve"].vms)
        ),
    }
    a = by_vm(make_plan(state, protected, POLICIES, now=T0))["a"]
    assert a.action is Action.BLOCKED and "but protected" in a.reasons[0]
    locked = {
        **obs,
        "pve": Observation(
            "pve", tuple(replace(v, lock="backup") if v.name == "a" else v for v in obs["pve"].vms)
        ),
    }
    a = by_vm(make_plan(state, locked, POLICIES, now=T0))["a"]
    assert a.action is Action.BLOCKED and "locked (backup)" in a.reasons[0]


def test_an_expired_vm_cannot_be_replaced():
    state = desired(with_expiry(PAST))
    plan = make_plan(state, converged(state), POLICIES, now=T0)
    with pytest.raises(PlanRefused, match="--replace 'a': it has expired"):
        with_replacements(plan, ["a"])
