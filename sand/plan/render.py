"""Plan → text in Terraform's vocabulary (→ JSON: ``sand.plan.plan_json``). Reads the
plan; decides nothing."""

from __future__ import annotations

import json
import time
from typing import Any

from sand.manifest.sizes import format_size
from sand.plan.idle import Asleep
from sand.plan.model import (
    Action,
    BaseAction,
    BaseChange,
    FieldChange,
    GuestAction,
    Plan,
    Strategy,
    VMChange,
)
from sand.plan.plan_json import plan_to_json, recovery_line, shared_stops
from sand.terminal import one_line

__all__ = ["plan_to_json", "render_change", "render_drift", "render_text"]

SYMBOLS = {
    Action.CREATE: "+",
    Action.UPDATE: "~",
    Action.NOOP: "~",  # shown only when the guest changes: a reprovision
    Action.REPLACE: "-/+",
    Action.DELETE: "-",
    Action.BLOCKED: "!",
}
_COLOURS = {"+": "32", "~": "33", "-/+": "35", "-": "31", "!": "31;1"}
_SIZE_FIELDS = {"memory", "disk"}


def _painter(colour: bool) -> Any:
    def paint(symbol: str, text: str) -> str:
        return f"\x1b[{_COLOURS[symbol]}m{text}\x1b[0m" if colour else text

    return paint


def render_text(plan: Plan, *, colour: bool = False) -> str:
    paint = _painter(colour)
    lines: list[str] = []
    for backend, why in sorted(plan.unknown_backends.items()):
        lines.append(f"Warning: backend {backend!r} is unknown this run: {why}")
        lines.append("  Nothing on it will be created, replaced or deleted.")
        lines.append("")
    for warning in plan.warnings:
        lines.append(f"Warning: {warning}")
    # A VM an interrupted create left half-made is finished below, not drift.
    drifted = [c for c in plan.drifted() if not plan.finishes(c)]
    if drifted:
        lines.append("Note: Objects have changed outside of sand")
        lines.append("")
        for change in drifted:
            lines.extend(render_drift(change))
        lines.append("")
    lines.extend(_render_recovery(plan))
    lines.extend(_render_out_of_date(plan))
    body = [c for c in plan.changes if c.acts or c.action is Action.BLOCKED or plan.finishes(c)]
    if plan.refresh_only:
        lines.append(
            "This was a refresh-only plan: drift is reported above, and nothing will change."
            if drifted
            else "No changes. Your VMs match what sand last applied."
        )
        return "\n".join(lines) + "\n"
    changing = bool(plan.actionable() or plan.bases)
    if not changing and not [c for c in body if c.action is Action.BLOCKED]:
        if plan.recovery:
            lines.append("No other changes: once recovered, your VMs match the manifest.")
        elif plan.out_of_date():
            lines.append(
                "No changes. Your VMs match the manifest, but for the ones out of date with "
                "their image (above)."
            )
        else:
            lines.append("No changes. Your VMs match the manifest.")
        return "\n".join(lines) + "\n"
    if changing:
        lines.append("sand will perform the following actions:")
        lines.append("")
    for base in plan.bases:
        lines.extend(_render_base(base, paint))
        lines.append("")
    unseen = {c.vm for c in body if _only_unseen(plan, c)}
    shared = shared_stops(plan)
    for change in body:
        if change.vm in unseen:
            continue
        if plan.finishes(change):
            lines.extend(_render_finish(change, paint))
        else:
            lines.extend(_render_change(change, paint, shared.get(change.vm, ())))
        lines.append("")
    lines.extend(_render_unseen(plan, [c for c in body if c.vm in unseen], paint))
    blocked = [c for c in body if c.action is Action.BLOCKED]
    if changing:
        add, chg, destroy = plan.counts()
        finish = plan.finish_count()
        finished = f"{finish} to finish, " if finish else ""
        lines.append(f"Plan: {add} to add, {finished}{chg} to change, {destroy} to destroy.")
        if plan.bases:
            built = sum(1 for b in plan.bases if b.action is BaseAction.BUILD)
            lines.append(f"Golden bases: {built} to build, {len(plan.bases) - built} to delete.")
        if blocked:
            lines.append(
                f"Blocked: {len(blocked)} VM(s) marked ! will not be touched; "
                "fix what is shown and plan again."
            )
    else:
        lines.append("No changes can be made now; see the blocked VMs above.")
    return "\n".join(lines) + "\n"


def _render_finish(change: VMChange, paint: Any) -> list[str]:
    """A VM a killed run's create made, kept by the journal's replay: ``>`` finished by
    this apply (what is left of its create: its marker, provisioning, power), not added.
    What that is shows only once the replay has waited for what the killed run left
    running (its start task may be what makes it look stopped now), so no field is
    listed as if it were a change of its own."""
    head = f"  # {_where(change.vm, change.backend, change.identity)}"
    out = [f"{head} will be finished: adopted from the journal (its create was interrupted)"]
    out.append("  #   what its create left undone is done once the replay has settled it")
    out.append(f"  {paint('~', '>')} vm {json.dumps(change.vm)}")
    return out


def _only_unseen(plan: Plan, change: VMChange) -> bool:
    """Blocked for no reason but its backend being unknown (said once, at the top)."""
    return (
        change.action is Action.BLOCKED
        and change.backend in plan.unknown_backends
        and not change.blockers
        and all(r.startswith("backend unknown:") for r in change.reasons)
    )


def _render_unseen(plan: Plan, changes: list[VMChange], paint: Any) -> list[str]:
    """One line per unknown backend for its VMs: a backend that refused sand is one
    problem, and twenty copies of its message buried the fix."""
    lines: list[str] = []
    for backend in sorted({c.backend for c in changes}):
        names = [c.vm for c in changes if c.backend == backend]
        count = f"{len(names)} VM{'s' * (len(names) != 1)}"
        lines.append(
            f"  {paint('!', '!')} {count} on {backend!r} cannot be changed now: the backend "
            f"is unknown this run (see the warning above): {', '.join(names)}"
        )
        lines.append("")
    return lines


def _render_recovery(plan: Plan) -> list[str]:
    if not plan.recovery:
        return []
    lines = [
        "Recovery: an interrupted run left unfinished work; apply settles it first:",
        "",
    ]
    for d in plan.recovery:
        lines.append(f"  # {_where(d.vm, d.backend, d.identity)} {recovery_line(plan, d)}")
    lines.append("")
    return lines


def render_drift(change: VMChange) -> list[str]:
    """What changed outside of sand on this VM, as the plan's "Note:" block lists it."""
    if not change.drift:
        return []
    lines = [f"  # {change.vm} ({change.backend}) has changed outside of sand"]
    for f in change.drift:
        lines.append(f"      {f.field}: {_value(f.field, f.after)} -> {_value(f.field, f.before)}")
    return lines


def render_change(change: VMChange, *, colour: bool = False) -> str:
    """One VM's change exactly as :func:`render_text` shows it inside a plan (the board
    of ``sand ui`` shows the selected VM's); a change that does nothing reads so."""
    if not change.acts and change.action is not Action.BLOCKED:
        return f"  # {change.vm} ({change.backend}) needs no change\n"
    return "\n".join(_render_change(change, _painter(colour))) + "\n"


def _render_out_of_date(plan: Plan) -> list[str]:
    stale = plan.out_of_date()
    if not stale:
        return []
    lines = [
        "Out of date: made from a golden image that changed since. They are kept as they "
        "are; `sand reset VM` replaces one, `rebuild: onBaseChange` replaces them on apply:",
        "",
    ]
    for c in stale:
        where = f"{c.backend}{', ' + c.identity if c.identity else ''}"
        lines.append(f"  # {c.vm} ({where}): {c.out_of_date}")
    lines.append("")
    return lines


def _render_base(base: BaseChange, paint: Any) -> list[str]:
    where = f"{base.backend}{', ' + base.identity if base.identity else ''}"
    verb = "will be built" if base.action is BaseAction.BUILD else "will be deleted"
    kind = "retired base" if base.observed is not None and base.observed.retired else "golden base"
    out = [f"  # {kind} {json.dumps(base.name)} ({where}) {verb}"]
    out.extend(f"  #   {reason}" for reason in base.reasons)
    if base.for_vms:
        out.append("  #   made from it this run: " + ", ".join(base.for_vms))
    symbol = "+" if base.action is BaseAction.BUILD else "-"
    out.append(f"  {paint(symbol, symbol)} base {json.dumps(base.name)} {{")
    spec: dict[str, object] = {"fingerprint": base.fingerprint}
    if base.desired is not None:
        d = base.desired
        spec = {
            "from": d.source,
            "user": d.user,
            "packages": list(d.content.packages),
            "agents": list(d.content.agents),
            "docker": d.docker,
            **({"steps": [s.name for s in d.content.steps]} if d.content.steps else {}),
            **spec,
        }
    width = max(len(k) for k in spec)
    for key, value in spec.items():
        out.append(f"      {paint(symbol, symbol)} {key.ljust(width)} = {_value(key, value)}")
    out.append("    }")
    return out


def _where(vm: str, backend: str, identity: str | None) -> str:
    """ "agent-1 (pve, 104)"; a Lima instance's identity is its name, said once:
    "agent-1 (laptop)", not "agent-1 (laptop, agent-1)"."""
    shown = f", {identity}" if identity and identity != vm else ""
    return f"{vm} ({backend}{shown})"


def _render_change(change: VMChange, paint: Any, stop_shared: tuple[str, ...] = ()) -> list[str]:
    symbol = SYMBOLS[change.action]
    head = f"  # {_where(change.vm, change.backend, change.identity)}"
    verb = _VERBS[change.verb]
    if change.would is not None:
        verb = f"is blocked: it {_WOULD[change.would]}"
    if change.action is Action.UPDATE and change.requires_restart:
        verb += " (requires restart)"
    if change.action is Action.UPDATE and change.guest is GuestAction.PROVISION:
        verb += " and reprovisioned"
    if change.action is Action.UPDATE and change.guest is GuestAction.SECRETS:
        verb += " (secrets re-delivered)"
    if change.sleep is not None:
        verb = "will go to sleep"
    elif change.asleep is not None and change.acts:
        verb += f" (woken first: {asleep_words(change.asleep)})"
    out = [f"{head} {verb}"]
    for reason in change.reasons:
        if change.sleep is None or reason != change.sleep.why:  # on the power line
            out.append(f"  #   {reason}")
    if change.acts and change.desired is not None:
        # A brokered secret is shown by its rules, never its value: it stays on this host.
        for grant in change.desired.brokered:
            out.append(f"  #   brokered (the token stays on this host) {grant.summary()}")
    for blocker in change.blockers:
        out.append(f"  #   {paint('!', '!')} {blocker}")
        out.extend(f"  #       {detail}" for detail in blocker.details)
    if change.strategy is not None and change.action is Action.REPLACE:
        out.append(f"  #   strategy: {change.strategy.value} ({_STRATEGY_NOTE[change.strategy]})")
    if change.base is not None and change.acts and change.desired is not None:
        named = change.desired.base.name if change.desired.base is not None else "?"
        out.append(f"  #   cloned from golden base {json.dumps(named)} ({change.base})")
    if stop_shared and change.desired is not None and change.desired.fork is not None:
        source, others = change.desired.fork.source, ", ".join(stop_shared)
        out.append(f"  #   {source} is stopped once for this copy and those of {others}")
    for kept in change.work_preserved:
        out.append(f"  #   unpushed work kept by preserve: {kept}")
    pad = " " * max(0, 3 - len(symbol))
    shown = change.blocked_action or change.action  # a blocked change shows what it would do
    made = _fork_note(change) if shown is Action.CREATE else ""
    pool = _spare_of(change)
    kind = "spare" if pool else "vm"
    if pool:
        refill = f" (refill {change.refill[0]}/{change.refill[1]})" if change.refill else ""
        made = f" of pool {pool}{refill}"
    elif change.claims and change.desired is not None:
        made = f" (claims spare {change.claims} of pool {change.desired.pool})"
    made += _generated_note(change) if shown is Action.CREATE else ""
    out.append(f"{pad}{paint(symbol, symbol)} {kind} {json.dumps(change.vm)}{made} {{")
    if shown is Action.CREATE and change.desired is not None:
        spec = change.desired.infra()
        width = max(len(k) for k in spec)
        for key, value in spec.items():
            if value in (None, [], False) and key in ("node", "ports", "protect"):
                continue
            out.append(f"      {paint('+', '+')} {key.ljust(width)} = {_value(key, value)}")
    elif shown is Action.DELETE and change.observed is not None:
        o = change.observed
        for key, value in (("cpus", o.cpus), ("memory", o.memory), ("disk", o.disk)):
            if value is not None:
                out.append(f"      {paint('-', '-')} {key.ljust(6)} = {_value(key, value)}")
    else:
        for f in change.fields:
            line = _field_line(f)
            if change.sleep is not None and f.field == "power":
                line = f"power {f.before} -> {f.after} ({change.sleep.why})"
            out.append(f"      {paint('~', '~')} {line}")
        # A kept machine shows its guest as changing, whether provisioned or only
        # given its secrets again.
        if change.acts and (change.guest is GuestAction.PROVISION or change.action is Action.NOOP):
            out.append(f"      {paint('~', '~')} guest = (known after apply)")
    out.append("    }")
    return out


def _spare_of(change: VMChange) -> str:
    """The pool ``change``'s VM is a spare of, wanted or not ("" for a VM)."""
    if change.desired is not None:
        return change.desired.spare_of
    return change.observed.marker.pool if change.observed and change.observed.marker else ""


def _generated_note(change: VMChange) -> str:
    """(from generator triage: acme/app#123 "Fix the login"): the item's text is
    anyone's who can open an issue or push a branch, so it is shown as one inert line."""
    source = change.desired.generated if change.desired is not None else None
    if source is None:
        return ""
    title = f" {json.dumps(one_line(source.title, 60), ensure_ascii=False)}" if source.title else ""
    return f" (from generator {source.generator}: {one_line(source.item, 80)}{title})"


def _fork_note(change: VMChange) -> str:
    """ " (fork of agent-1 at apply time)": what a fork is made from is only known then."""
    fork = change.desired.fork if change.desired is not None else None
    if fork is None:
        return ""
    memory = ", with its memory" if fork.memory else ""
    stops = ""
    if fork.stops_source:
        working = ", even while its agent works" if fork.force else ""
        stops = f": stops {fork.source} for the copy{working}"
    return f" (fork of {fork.source} at apply time{memory}{stops})"


# Keyed by VMChange.verb: the machine's action, or "reprovision" for a kept machine
# whose guest changes.
_VERBS = {
    "create": "will be created",
    "update": "will be updated in place",
    "reprovision": "will be reprovisioned",
    "replace": "must be replaced",
    "delete": "will be destroyed",
    "blocked": "cannot be changed now",
}
_WOULD = {
    "create": "would be created",
    "update": "would be updated in place",
    "reprovision": "would be reprovisioned",
    "replace": "would be replaced",
    "delete": "would be destroyed",
    "no-op": "needs no change",
    "blocked": "is blocked",
}
_STRATEGY_NOTE = {
    Strategy.CREATE_BEFORE_DESTROY: "the new VM is made and provisioned before the old one "
    "is deleted",
    Strategy.DESTROY_BEFORE_CREATE: "the backend cannot hold both: the old VM is deleted "
    "first, its preserve: paths archived on this host",
}


def asleep_words(asleep: Asleep) -> str:
    """ "asleep since 14:02 (suspended)": the host's local time, as a person reads it."""
    since = f" since {time.strftime('%H:%M', time.localtime(asleep.since))}" if asleep.since else ""
    return f"asleep{since} ({asleep.how})"


def _field_line(f: FieldChange) -> str:
    line = f"{f.field} = {_value(f.field, f.before)} -> {_value(f.field, f.after)}"
    if f.forces_replacement:
        line += " # forces replacement"
    elif f.pending_reboot:
        line += " (pending reboot)"
    elif f.requires_restart:
        line += " # requires restart"
    return line


def _value(field: str, value: object) -> str:
    if field in _SIZE_FIELDS and isinstance(value, int):
        return json.dumps(format_size(value))
    return json.dumps(value, default=str)
