"""Egress in the plan (pure): a deny policy its backend cannot enforce is refused, the
create above all; where a backend enforces it, the policy is made with the VM, a change
of it is ``~ egress`` in place, a hand's change of it is drift, and dropping it opens
the VM in a change that says so."""

from __future__ import annotations

import re
from dataclasses import replace

from sand.backends.capabilities import Capabilities, Mutability
from sand.backends.lima.egress import REMOTE_GAP
from sand.plan import make_plan
from sand.plan.egress import EGRESS_BLOCKER
from sand.plan.model import Action
from sand.plan.render import render_text
from tests.plan.helpers import LIMA_POLICY, MANIFEST, POLICIES, PVE_POLICY, converged, desired

DENY = "    egress: {domains: [github.com]}\n"
# A backend that enforces egress: it declares the field, changed in place.
ENFORCING = Capabilities(
    field_policy={**PVE_POLICY.field_policy, "egress": Mutability.IN_PLACE},
    suspends=True,
)


def with_vm_a(extra: str) -> str:
    return MANIFEST.replace("  - name: a\n", "  - name: a\n" + extra)


def change_of(plan, name):  # type: ignore[no-untyped-def]
    return next(c for c in plan.changes if c.vm == name)


def test_a_new_vm_with_a_deny_policy_is_refused_where_it_cannot_be_enforced():
    state = desired(
        with_vm_a(DENY).replace("    ports:", "    egress: {cidrs: [10.0.0.0/8]}\n    ports:")
    )
    # Local Lima enforces it (in the VM's QEMU); a remote Lima host says why it cannot.
    remote = replace(_empty("laptop"), egress_gap=REMOTE_GAP)
    for laptop, lima_gap in ((_empty("laptop"), None), (remote, REMOTE_GAP)):
        plan = make_plan(state, {"pve": _empty("pve"), "laptop": laptop}, POLICIES)
        a, c = change_of(plan, "a"), change_of(plan, "c")
        for change, gap in ((a, PVE_POLICY.egress_names_gap), (c, lima_gap)):
            if gap is None:
                assert change.action is Action.CREATE
                continue
            assert change.action is Action.BLOCKED and change.blocked_action is Action.CREATE
            (blocker,) = change.blockers
            assert blocker.kind == EGRESS_BLOCKER
            assert blocker.reason.endswith(gap)
        assert "egress: deny except 1 domain, 0 cidrs on port 443 cannot be enforced on " in (
            a.blockers[0].reason
        )
        assert change_of(plan, "b").action is Action.CREATE  # no policy: made as before


def test_an_allow_policy_needs_no_enforcement_and_is_not_refused():
    state = desired(with_vm_a("    egress: {policy: allow}\n"))
    plan = make_plan(state, {"pve": _empty("pve"), "laptop": _empty("laptop")}, POLICIES)
    assert change_of(plan, "a").action is Action.CREATE


def test_an_existing_vm_given_a_policy_its_backend_cannot_enforce_is_refused_not_recorded():
    before = desired()
    state = desired(with_vm_a(DENY))
    plan = make_plan(state, converged(before), POLICIES)
    a = change_of(plan, "a")
    # Without the refusal this would be "record the converged spec": a VM said closed
    # and left open.
    assert a.action is Action.BLOCKED and a.blocked_action is Action.UPDATE
    assert [(f.field, f.before, f.after) for f in a.fields] == [
        ("egress", "not enforced", state.vms[0].infra()["egress"])
    ]
    assert a.reasons == ()  # not "record the converged spec": the policy is what differs
    assert change_of(plan, "b").action is Action.NOOP


def test_refresh_only_reports_and_refuses_nothing():
    plan = make_plan(desired(with_vm_a(DENY)), converged(desired()), POLICIES, refresh_only=True)
    assert change_of(plan, "a").action is Action.NOOP


def test_where_the_backend_enforces_it_the_vm_is_created_with_its_policy():
    state = desired(with_vm_a(DENY))
    plan = make_plan(state, {"pve": _empty("pve"), "laptop": _empty("laptop")}, _enforcing())
    a = change_of(plan, "a")
    assert a.action is Action.CREATE
    assert a.desired is not None and str(a.desired.infra()["egress"]).startswith("deny except")
    shown = r'\+ egress +\= "deny except 1 domain, 0 cidrs on port 443 #[0-9a-f]{12}"'
    assert re.search(shown, render_text(plan))


def test_a_changed_policy_is_an_in_place_update_of_egress():
    old = desired(with_vm_a(DENY))
    new = desired(with_vm_a("    egress: {domains: [github.com, pypi.org], ports: [443, 22]}\n"))
    observations = _enforced(old)
    plan = make_plan(new, observations, _enforcing())
    a = change_of(plan, "a")
    assert a.action is Action.UPDATE
    (field,) = a.fields
    assert field.field == "egress" and not field.forces_replacement and not field.requires_restart
    assert field.before == old.vms[0].infra()["egress"]
    assert field.after == new.vms[0].infra()["egress"]
    assert '~ egress = "deny except 1 domain' in render_text(plan)
    assert '-> "deny except 2 domains, 0 cidrs on ports 22,443 #' in render_text(plan)


def test_a_policy_changed_by_hand_is_drift_the_plan_restores():
    state = desired(with_vm_a(DENY))
    observations = _enforced(state, seen="allow")  # someone opened the firewall
    plan = make_plan(state, observations, _enforcing())
    a = change_of(plan, "a")
    assert a.action is Action.UPDATE
    assert [f.field for f in a.drift] == ["egress"]
    assert a.drift[0].after == state.vms[0].infra()["egress"]
    reported = make_plan(state, observations, _enforcing(), correct_drift=False)
    assert change_of(reported, "a").action is Action.NOOP


def test_dropping_the_policy_opens_the_vm_in_a_change_that_says_so():
    old = desired(with_vm_a(DENY))
    plan = make_plan(desired(), _enforced(old), _enforcing())
    (field,) = change_of(plan, "a").fields
    assert (field.field, field.after) == ("egress", "allow")


def _enforcing() -> dict[str, Capabilities]:
    return {"pve": ENFORCING, "laptop": LIMA_POLICY}


def _enforced(state, seen: str | None = None):  # type: ignore[no-untyped-def]
    """The fleet as converged, each VM listing the policy it is enforced with."""
    observations = converged(state)
    shown = {vm.name: vm.infra().get("egress") for vm in state.vms}
    return {
        name: replace(
            obs,
            vms=tuple(
                replace(o, egress=seen or shown[o.name]) if shown[o.name] else o for o in obs.vms
            ),
        )
        for name, obs in observations.items()
    }


def _empty(backend: str):  # type: ignore[no-untyped-def]
    from sand.observed import Observation

    return Observation(backend, ())


def test_a_vm_on_a_backend_not_observed_is_refused_without_a_made_up_field():
    from sand.observed import Observation

    unknown = {"pve": Observation("pve", (), unknown_reason="API down"), "laptop": _empty("laptop")}
    a = change_of(make_plan(desired(with_vm_a(DENY)), unknown, POLICIES), "a")
    assert a.action is Action.BLOCKED and a.fields == ()
    assert [b.kind for b in a.blockers] == [EGRESS_BLOCKER]
    assert a.reasons == ("backend unknown: API down",)


CIDRS = "    egress: {cidrs: [10.20.0.0/16], ports: [443, 22]}\n"


def test_on_proxmox_a_cidr_policy_is_created_and_one_with_domains_refused():
    """The PVE firewall matches addresses: a policy of cidrs is enforced, one that names
    domains is refused with that reason (no resolver or proxy for the VM yet)."""
    plan = make_plan(desired(with_vm_a(CIDRS)), {"pve": _empty("pve")}, POLICIES)
    assert change_of(plan, "a").action is Action.CREATE
    plan = make_plan(desired(with_vm_a(DENY)), {"pve": _empty("pve")}, POLICIES)
    a = change_of(plan, "a")
    assert a.action is Action.BLOCKED and a.blocked_action is Action.CREATE
    assert "the PVE firewall matches addresses, not names" in a.blockers[0].reason


def test_a_backend_that_cannot_enforce_now_refuses_every_deny_policy_with_its_word():
    """The observation's word (the datacenter firewall off, or not readable) refuses a
    create and a VM already enforced alike: either would be open."""
    state = desired(with_vm_a(CIDRS))
    off = "the datacenter's firewall is off"
    empty = {"pve": replace(_empty("pve"), egress_gap=off)}
    a = change_of(make_plan(state, empty, POLICIES), "a")
    assert a.action is Action.BLOCKED and a.blocked_action is Action.CREATE
    assert a.blockers[0].reason.endswith(f"on backend 'pve': {off}")
    seen = {k: replace(v, egress_gap=off) for k, v in _enforced(state).items()}
    a = change_of(make_plan(state, seen, POLICIES), "a")
    assert a.action is Action.BLOCKED and a.blockers[0].reason.endswith(off)
    assert change_of(make_plan(state, _enforced(state), POLICIES), "a").action is Action.NOOP
