"""``sand status``: per VM, desired against observed and the conditions; the project's
leases. Read-only; exit 1 when a backend could not be observed."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from sand.agentstate import session_lines
from sand.cli.exits import EXIT_ERROR, EXIT_OK
from sand.survey.status import StatusRow, status_report
from sand.terminal import continued, one_line


def run(args: argparse.Namespace) -> int:

    if args.timeout is not None and not args.deep:
        print("Error: --timeout is for --deep (the guests' own checks)", file=sys.stderr)
        return EXIT_ERROR
    report = status_report(args.manifest, deep=args.deep, timeout=args.timeout)
    rows = report.rows
    # A backend nobody could look at is an error, not "absent": exit 1, text or JSON.
    code = EXIT_ERROR if report.unknown_backends else EXIT_OK
    if args.json:
        print(json.dumps(report.to_json(), indent=2, default=str))
        return code
    if not rows:
        print("No VMs in the manifest" + ("." if code else " and none managed."))
    else:
        _print_status_table(rows, set(report.unknown_backends))
    for r in rows:
        if r.claimed_by:
            print(
                f"{r.vm}: claimed by {r.claimed_by}: the next apply renames it "
                f"{r.claimed_by} and refills its slot"
            )
        if r.last_error:
            print(f"{r.vm}: last error: {continued(r.last_error)}")
        for problem in r.guest_health or ():
            print(f"{r.vm}: not healthy: {continued(problem)}")
        for line in session_lines(r.agents, time.time()):
            print(f"{r.vm}: {line}")
    for lease in report.leases:
        print(_lease_line(lease))
    for warning in report.warnings:
        print(f"Warning: {continued(warning)}")
    for backend, why in sorted(report.unknown_backends.items()):
        print(f"Backend {backend!r} could not be observed (its VMs are unknown): {why}")
    if code:
        print("Run `sand doctor` to check the unknown backends.", file=sys.stderr)
    return code


def _lease_line(lease: dict[str, Any]) -> str:

    h = lease["holder"]
    who = f"{h['host']} (pid {h['pid']}" + (
        f", revision {h['revision'][:12]}" if h["revision"] else ""
    )
    who = one_line(who + ")")
    if lease["held"]:
        return (
            f"Lease on {lease['backend']}: being applied by {who} since {lease['since']} "
            f"(expires {lease['expires']} unless renewed)"
        )
    return f"Lease on {lease['backend']}: free; last applied by {who}, until {lease['since']}"


def _observed_cell(observed: dict[str, Any] | None, backend: str, unseen: set[str]) -> str:
    if observed is None:
        return "absent"
    if backend in unseen:  # one cause for all its VMs: said once, under the table
        return f"unknown (backend {backend!r}, below)"
    if observed.get("power") == "unknown":
        return f"unknown ({_short(str(observed.get('reason') or 'backend not observed'))})"
    return str(observed["power"])


def _short(text: str, limit: int = 64) -> str:
    """The first line of ``text``, cut to ``limit`` characters (the full text follows
    the table)."""
    line = " ".join(text.strip().splitlines()[0].split()) if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _print_status_table(rows: list[StatusRow], unseen: set[str]) -> None:

    header = ("VM", "BACKEND", "ID", "DESIRED", "OBSERVED", "SYNCED", "HEALTHY", "PROVISIONED")
    table = [header] + [
        (
            r.vm,
            r.backend,
            r.identity or "-",
            r.desired["state"] if r.desired else "absent",
            _observed_cell(r.observed, r.backend, unseen),
            str(r.conditions["Synced"]) + (" (asleep)" if r.asleep else ""),
            *(str(r.conditions[c]) for c in ("Healthy", "Provisioned")),
        )
        for r in rows
    ]
    table = [tuple(one_line(str(v)) for v in row) for row in table]  # observed values too
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        print("  ".join(str(v).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())
