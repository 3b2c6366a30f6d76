"""``validate``, ``schema``, ``status`` and ``doctor``: each returns the exit code.

(``plan``, ``apply`` and ``destroy`` are in ``sand.cli.apply``; the per-VM verbs in
``sand.cli.verbs``.)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from sand.cli.exits import EXIT_ERROR, EXIT_OK

if TYPE_CHECKING:  # imported where used: `sand validate` need not load the survey
    from sand.survey.status import StatusRow


def cmd_validate(args: argparse.Namespace) -> int:
    """Each manifest named (``-``: stdin) checked on its own; exit 1 when any is invalid."""
    from sand.cli.flags import DEFAULT_MANIFEST
    from sand.errors import ManifestError

    names = [*args.manifests, *args.manifest_files] or [DEFAULT_MANIFEST]
    results: list[dict[str, Any]] = []
    for name in names:
        try:
            m = _validated(name).manifest
        except ManifestError as exc:
            results.append({"file": name, "valid": False, "problems": exc.problems})
            continue
        results.append(
            {"file": name, "valid": True, "vms": len(m.vms), "backends": len(m.backends)}
        )
    if args.json:
        for r in results:
            r["problems"] = [
                {"file": p.file, "line": p.line, "column": p.column, "message": p.message}
                for p in r.get("problems", ())
            ]
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            _print_validated(r)
    return EXIT_OK if all(r["valid"] for r in results) else EXIT_ERROR


def _validated(name: str) -> Any:
    from pathlib import Path

    from sand.manifest import load_manifest, load_manifest_bytes

    if name == "-":
        return load_manifest_bytes(sys.stdin.buffer.read(), Path("<stdin>"))
    return load_manifest(name)


def _print_validated(result: dict[str, Any]) -> None:
    name = "<stdin>" if result["file"] == "-" else result["file"]
    if result["valid"]:
        vms, backends = result["vms"], result["backends"]
        print(
            f"{name}: valid ({vms} VM{'s' * (vms != 1)} on "
            f"{backends} backend{'s' * (backends != 1)})"
        )
        return
    problems = result["problems"]
    for problem in problems:
        print(problem, file=sys.stderr)
    count = len(problems)
    print(f"Error: {name} is invalid ({count} problem{'s' * (count != 1)}).", file=sys.stderr)


def cmd_schema(args: argparse.Namespace) -> int:
    if args.output:
        from importlib.resources import files

        # The file shipped in the package: what `plan.schema.json` in an $ref names.
        sys.stdout.write((files("sand") / "schemas" / f"{args.output}.schema.json").read_text())
        return EXIT_OK
    from sand.manifest.schema import schema_text

    sys.stdout.write(schema_text())
    return EXIT_OK


def cmd_status(args: argparse.Namespace) -> int:
    from sand.agentstate import session_lines
    from sand.survey.status import status_report
    from sand.terminal import continued

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
    from sand.terminal import one_line

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
    from sand.terminal import one_line

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


def cmd_doctor(args: argparse.Namespace) -> int:
    import asyncio

    from sand.backends.abilities import Diagnoses
    from sand.backends.protocol import Backend
    from sand.desired import DesiredVM
    from sand.errors import SandError
    from sand.project import open_session

    session = open_session(args.manifest, lock=False)

    def mine(name: str) -> list[DesiredVM]:
        return [vm for vm in session.desired.vms if vm.backend == name]

    async def check(backend: Backend) -> list[str]:
        if not isinstance(backend, Diagnoses):
            return []
        try:
            return list(await backend.doctor(mine(backend.name)))
        except SandError as exc:  # a check that could not even run is a finding too
            return [f"error: {exc}"]

    async def run() -> list[tuple[str, list[str]]]:
        try:
            names = list(session.backends)
            found = await asyncio.gather(*(check(session.backends[n]) for n in names))
            return list(zip(names, found, strict=True))
        finally:
            await session.close()

    results = asyncio.run(run())
    # Problems first, one line per cause naming its backend; then `ok` only for the
    # backends that have none, so the last lines never hide a failure above them.
    for name, findings in results:
        for finding in findings:
            print(f"{name}: {' / '.join(str(finding).splitlines())}")
    for name, findings in results:
        if not findings:
            print(f"{name}: ok")
    return EXIT_ERROR if any(findings for _, findings in results) else EXIT_OK
