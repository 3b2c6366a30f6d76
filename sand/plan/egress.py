"""Egress in the plan: a VM whose policy its backend cannot enforce is refused (``!``).

A policy that is not enforced is worse than none: the person reading ``egress: deny``
believes the VM closed. So a VM with a deny policy on a backend that cannot enforce
it (``Capabilities.egress_gap``) is blocked whatever else its change is, a create
above all (a VM is never made open and closed after boot), located at the ``egress:``
that asks for it once the plan meets the manifest's file. Where the backend enforces
it, the policy is a field like any other (``~ egress``, in place; sand.plan.fields).
"""

from __future__ import annotations

from dataclasses import replace

from sand.backends.capabilities import Capabilities
from sand.desired import DesiredVM
from sand.manifest.egress import DENY
from sand.plan.gates import block
from sand.plan.model import RECORD, Action, Blocker, FieldChange, VMChange

# The blocker's kind: located at the VM's (or its defaults') ``egress:`` by the survey.
EGRESS_BLOCKER = "egress"
# What an existing VM's egress is where the backend cannot enforce one.
NOT_ENFORCED = "not enforced"


def refused_egress(
    change: VMChange, vm: DesiredVM, can: Capabilities, gap: str | None = None
) -> VMChange:
    """``change`` blocked when ``vm`` asks for a policy its backend cannot enforce: its
    type cannot at all, cannot filter the names it lists, or ``gap`` (the observation's
    word: the backend cannot now) says why not."""
    if vm.egress is None or vm.egress.policy != DENY or change.action is Action.DELETE:
        return change
    if can.enforces_egress:
        gap = gap or (can.egress_names_gap if vm.egress.domains else None)
        if not gap:
            return change
    else:
        gap = can.egress_gap
    why = f"egress: {vm.egress.summary} cannot be enforced on backend {vm.backend!r}: "
    existing = change.observed is not None and change.action is not Action.CREATE
    if existing and not any(f.field == "egress" for f in change.fields):
        # An existing VM given a policy: the plan shows the policy it would take, not
        # "record the converged spec" (the fingerprint is all that differs).
        shown = FieldChange("egress", NOT_ENFORCED, vm.infra()["egress"])
        reasons = tuple(r for r in change.reasons if r != RECORD)
        change = replace(change, fields=(*change.fields, shown), reasons=reasons)
    return block(change, (Blocker(why + gap, kind=EGRESS_BLOCKER),))
