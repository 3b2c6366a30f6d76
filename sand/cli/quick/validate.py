"""``sand validate`` of manifests found valid in exactly this state before: the same
output, without loading the manifest's models (pydantic and their validators: ~100 ms
of a check of one VM). Shared with the handler: how a result is printed."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sand.cli.exits import EXIT_OK
from sand.cli.flags import DEFAULT_MANIFEST
from sand.state.validated import validated_before


def names_of(args: argparse.Namespace) -> list[str]:
    return [*args.manifests, *args.manifest_files] or [DEFAULT_MANIFEST]


def answer(args: argparse.Namespace) -> int | None:
    """The exit code when every manifest named was found valid unchanged; else None
    (stdin, a file that cannot be read, one changed: the handler checks them all)."""
    results: list[dict[str, Any]] = []
    for name in names_of(args):
        if name == "-":
            return None
        try:
            raw = Path(name).read_bytes()
        except OSError:
            return None
        counts = validated_before(Path(name), raw)
        if counts is None:
            return None
        results.append({"file": name, "valid": True, "vms": counts[0], "backends": counts[1]})
    show(results, as_json=args.json)
    return EXIT_OK


def show(results: list[dict[str, Any]], *, as_json: bool) -> None:
    if as_json:
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
