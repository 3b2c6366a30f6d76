"""``sand validate``: each manifest named (``-``: stdin) checked on its own, as plan
would read it, without contacting a backend; exit 1 when any is invalid."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sand.cli.exits import EXIT_ERROR, EXIT_OK
from sand.cli.flags import DEFAULT_MANIFEST
from sand.errors import ManifestError
from sand.manifest import load_manifest, load_manifest_bytes
from sand.manifest.loader import LoadedManifest


def run(args: argparse.Namespace) -> int:
    """Each manifest named (``-``: stdin) checked on its own; exit 1 when any is invalid."""

    names = [*args.manifests, *args.manifest_files] or [DEFAULT_MANIFEST]
    results: list[dict[str, Any]] = []
    for name in names:
        try:
            m = _validated(name).manifest
        except ManifestError as exc:
            results.append(
                {"file": name, "valid": False, "problems": exc.problems, "summary": exc.summary}
            )
            continue
        results.append(
            {"file": name, "valid": True, "vms": len(m.vms), "backends": len(m.backends)}
        )
    if args.json:
        for r in results:
            r.pop("summary", None)  # the text's last line; the problems say it all
            r["problems"] = [
                {"file": p.file, "line": p.line, "column": p.column, "message": p.message}
                for p in r.get("problems", ())
            ]
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            _print_validated(r)
    return EXIT_OK if all(r["valid"] for r in results) else EXIT_ERROR


def _validated(name: str) -> LoadedManifest:

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
    summary = result["summary"] or f"{name} is invalid ({count} problem{'s' * (count != 1)})"
    print(f"Error: {summary}.", file=sys.stderr)
