"""``sand audit log|verify|checkpoint``: the host's audit trail (``sand.audit``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sand.audit.check import Export, check_host
from sand.audit.entries import FORMAT_VERSION, describe, entries, parse_since
from sand.audit.export import default_ref, export_git, export_syslog, syslog_target
from sand.audit.log import LOG_FILE
from sand.audit.trail import audit_dir, host_log
from sand.audit.verify import Report
from sand.cli.exits import EXIT_ERROR, EXIT_OK
from sand.errors import SandError


def run(args: argparse.Namespace) -> int:
    action = args.audit_action
    if action == "log":
        return _log(args)
    if action == "verify":
        return _verify(args)
    return _checkpoint(args)


def _log(args: argparse.Namespace) -> int:
    try:
        since = parse_since(args.since) if args.since else None
    except ValueError as exc:
        raise SandError(str(exc)) from None  # a usage error: exit 1, nothing read
    path = audit_dir() / LOG_FILE
    found = entries(path, vm=args.vm, since=since)
    if args.json:
        doc = {"format_version": FORMAT_VERSION, "log": str(path), "records": list(found)}
        print(json.dumps(doc, indent=2))
        return EXIT_OK
    for rec in found:
        print(describe(rec))
    return EXIT_OK


def _verify(args: argparse.Namespace) -> int:
    ref = args.ref or default_ref()
    key = Path(args.key) if args.key else None
    report = check_host(audit_dir(), against=[Export(r, ref) for r in args.against], key=key)
    for line in _report_lines(report, audit_dir() / LOG_FILE):
        print(line, file=sys.stdout if report.ok else sys.stderr)
    return EXIT_OK if report.ok else EXIT_ERROR


def _report_lines(report: Report, path: Path) -> list[str]:
    lines = []
    for torn in report.torn:
        named = "named by the audit.torn record after it" if torn.acknowledged else "the last line"
        lines.append(
            f"{path}:{torn.line}: a record torn by a writer killed mid-append "
            f"({torn.length} bytes at offset {torn.offset}; {named}): not a record"
        )
    if report.problem is not None:
        p = report.problem
        where = f"{path}:{p.line}" if p.line else str(path)
        seq = f" (record {p.seq})" if p.seq is not None else ""
        lines.append(f"Error: {where}{seq}: {p.message}")
        return lines
    signed = (
        f", signed through record {report.last_signed}"
        if report.checkpoints
        else ", none signed yet"
    )
    lines.append(
        f"{path}: {report.records} records, {report.checkpoints} checkpoints{signed}: intact"
    )
    return lines


def _checkpoint(args: argparse.Namespace) -> int:
    for target in args.syslog:
        syslog_target(target)  # a bad one refused before anything is signed
    claim = host_log().checkpoint()
    print(f"checkpoint: record {claim.seq} is {claim.head}, signed by key {claim.key}")
    ref = args.ref or default_ref()
    for repo in args.export:
        commit = export_git(audit_dir(), claim, repo, ref)
        print(f"exported to {repo} {ref} as {commit}")
    for target in args.syslog:
        export_syslog(claim, target)
        print(f"sent to syslog {target}")
    return EXIT_OK
