"""``sand doctor``: each backend the manifest names checked for what sand needs there
(reachable, credentials, privileges, storage, templates, tools); one line per problem
naming its backend, ``NAME: ok`` for the healthy ones; ``--json`` for a pipeline."""

from __future__ import annotations

import argparse
import asyncio
import json

from sand.backends.abilities import Diagnoses
from sand.backends.protocol import Backend
from sand.cli.exits import EXIT_ERROR, EXIT_OK
from sand.desired import DesiredVM
from sand.errors import SandError
from sand.project import open_session

FORMAT_VERSION = "1"


def run(args: argparse.Namespace) -> int:
    results = asyncio.run(_diagnose(args.manifest))
    if args.json:
        backends = [
            {"name": name, "ok": not findings, "problems": [_one_line(f) for f in findings]}
            for name, findings in results
        ]
        ok = all(b["ok"] for b in backends)
        print(
            json.dumps({"format_version": FORMAT_VERSION, "ok": ok, "backends": backends}, indent=2)
        )
    else:
        # Problems first, one line per cause naming its backend; then `ok` only for the
        # backends that have none, so the last lines never hide a failure above them.
        for name, findings in results:
            for finding in findings:
                print(f"{name}: {_one_line(finding)}")
        for name, findings in results:
            if not findings:
                print(f"{name}: ok")
    return EXIT_ERROR if any(findings for _, findings in results) else EXIT_OK


def _one_line(finding: str) -> str:
    return " / ".join(str(finding).splitlines())


async def _diagnose(manifest: str) -> list[tuple[str, list[str]]]:
    session = open_session(manifest, lock=False)

    def mine(name: str) -> list[DesiredVM]:
        return [vm for vm in session.desired.vms if vm.backend == name]

    async def check(backend: Backend) -> list[str]:
        if not isinstance(backend, Diagnoses):
            return []
        try:
            return list(await backend.doctor(mine(backend.name)))
        except SandError as exc:  # a check that could not even run is a finding too
            return [f"error: {exc}"]

    try:
        names = list(session.backends)
        found = await asyncio.gather(*(check(session.backends[n]) for n in names))
        return list(zip(names, found, strict=True))
    finally:
        await session.close()
