"""``sand validate``: each manifest named (``-``: stdin) checked on its own, as plan
would read it, without contacting a backend; exit 1 when any is invalid. A manifest
found valid is remembered (``sand.state.validated``), so that checking it again
unchanged is answered before this handler loads (``sand.cli.quick.validate``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sand.cli.exits import EXIT_ERROR, EXIT_OK
from sand.cli.quick.validate import names_of, show
from sand.errors import ManifestError
from sand.manifest import load_manifest, load_manifest_bytes
from sand.manifest.loader import LoadedManifest
from sand.state.validated import keep_validated


def run(args: argparse.Namespace) -> int:
    """Each manifest named (``-``: stdin) checked on its own; exit 1 when any is invalid."""
    results: list[dict[str, Any]] = []
    for name in names_of(args):
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
    show(results, as_json=args.json)
    return EXIT_OK if all(r["valid"] for r in results) else EXIT_ERROR


def _validated(name: str) -> LoadedManifest:
    if name == "-":
        return load_manifest_bytes(sys.stdin.buffer.read(), Path("<stdin>"))
    file = Path(name)
    try:
        raw = file.read_bytes()
    except OSError:
        return load_manifest(file)  # raises the error that names the file
    loaded = load_manifest_bytes(raw, file)
    keep_validated(file, raw, len(loaded.manifest.vms), len(loaded.manifest.backends))
    return loaded
