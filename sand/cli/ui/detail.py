"""The detail pane of the selected VM, as text: its planned change exactly as the plan
renders it, its journal entries still on file, its last provisioning log, its
repos' landing state as ``sand land`` reports it (after ``l``), and its last records in
the host's audit trail.

Built from data only (the readers of the host's state files are passed in by the
app), so it is tested without a terminal; every line passes the model's inert and
redacting filter before it is shown.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sand.agentstate import session_lines
from sand.cli.ui.model import Activity, BoardRow, age, shown
from sand.plan.model import VMChange
from sand.plan.render import render_change, render_drift


@dataclass(frozen=True)
class Detail:
    row: BoardRow
    change: VMChange | None = None  # from the newest plan (a refresh's, or p's)
    plan_kind: str = "status"  # "status": a refresh's read-only plan; "plan": p's
    journal: Sequence[Mapping[str, Any]] = ()
    provision_log: Sequence[str] = ()
    landing: str | None = None  # sand land's table, once swept with l
    activity: Activity | None = None
    forks: Sequence[str] = ()  # the VMs of the board that are forks of this one
    audit: Sequence[str] = ()  # its last records in the host's audit trail, described


def detail_text(d: Detail, width: int = 78) -> str:
    r = d.row
    lines = [f"{r.vm} on {r.backend} — {r.sync}" + (f": {r.why}" if r.why else "")]
    if r.role_whole:
        lines.append(f"  {r.role_whole}")
    if r.fork_of:
        lines.append(f"  c: compare the forks of {r.fork_of} side by side")
    elif d.forks:
        lines.append(f"  forks: {shown(', '.join(d.forks), width - 9)} (c compares them)")
    # What a narrow table leaves out (the address, the age) is always here.
    facts = [f"reached at {r.address}"] if r.address else []
    if r.created_at is not None:
        facts.append(f"made {age(r.created_at, time.time())} ago")
    if facts:
        lines.append("  " + " · ".join(facts))
    if r.unobservable:
        lines.append("  this VM's backend could not be observed: what it holds is unknown")
    if d.activity is not None:
        lines.append(f"  now: {d.activity.text(time.monotonic())}")
    if r.last_at is not None:
        lines.append(f"  last apply: {r.last_whole(time.time())}")
    if r.agents is not None:
        lines += ["", "agents (what the guest's hooks report):"]
        said = session_lines(r.agents, time.time())
        lines += [f"  {shown(x, width)}" for x in said] or ["  (no session has reported)"]
    lines += ["", _heading("planned change", d.plan_kind)]
    if d.change is None:
        lines.append("  (not in the last plan)")
    else:
        lines += ["  " + shown(x, width) for x in render_change(d.change).splitlines()]
        lines += ["  " + shown(x, width) for x in render_drift(d.change)]
    lines += ["", "journal (operations on file; the next apply settles an open one):"]
    lines += [f"  {line}" for line in journal_lines(d.journal)] or ["  (none on file)"]
    lines += ["", "last provisioning log:"]
    lines += [f"  {shown(x, width)}" for x in d.provision_log] or ["  (none kept on this host)"]
    lines += ["", "landing (what sand land reports):"]
    if d.landing is None:
        lines.append("  press l to sweep the guest's checkouts")
    else:
        lines += [f"  {shown(x, width)}" for x in d.landing.splitlines()] or ["  (nothing)"]
    lines += ["", "audit trail (this host's last records of it; sand audit log --vm):"]
    lines += [f"  {shown(x, width)}" for x in d.audit] or ["  (none recorded lately)"]
    return "\n".join(lines)


def _heading(title: str, kind: str) -> str:
    source = "p's plan" if kind == "plan" else "the last refresh, unchecked: p plans in full"
    return f"{title} ({source}):"


def journal_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """Journal records as lines, one per operation: when it began, what it is, and how
    it ended ("power 103 to suspended: done"). An operation closed by its outcome reads
    as that outcome, never as "begun"; one still open says the step it reached."""
    ops: dict[str, dict[str, Any]] = {}
    for rec in records:
        key = str(rec.get("id", ""))
        op = ops.setdefault(key, {"what": "?", "ts": rec.get("ts"), "steps": [], "end": ""})
        phase = str(rec.get("phase", "?"))
        if phase == "intent":
            to = f" to {rec['to']}" if rec.get("to") else ""
            op.update(what=f"{rec.get('op', '?')} {rec.get('identity', '')}".strip() + to,
                      ts=rec.get("ts"))  # fmt: skip
        elif phase == "step":
            if rec.get("step") != "task":  # a backend task's id: not a step to read
                op["steps"].append(str(rec.get("step", "?")))
        elif phase == "settled":
            op["end"] = f"settled ({rec.get('how', '?')})"
        else:
            op["end"] = phase  # done, failed
    return [shown(f"{_clock(op['ts'])} {op['what']}: {_ending(op)}") for op in ops.values()]


def _ending(op: Mapping[str, Any]) -> str:
    reached = f" {op['steps'][-1]}" if op["steps"] else ""
    if op["end"] == "done":
        return "done"
    if op["end"]:
        return f"{op['end']}{' after' + reached if reached else ''}"
    return f"open{' (reached' + reached + ')' if reached else ''}"


def _clock(ts: object) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(ts)))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"
