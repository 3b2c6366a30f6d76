"""``sand fork VM --count N``: the manifest entries of N forks of a VM, printed.

It writes nothing: the manifest stays the one source of the fleet, so the entries are
printed to be added under ``vms:`` (a VM the manifest leaves out is deleted by the next
apply). The entries are checked as the manifest's own would be, on the manifest they
would join: a name a backend refuses, ``--memory`` on Lima. docs/fork-and-pools.md.

stdout carries the entries and nothing else, ``--apply`` or not, so that
``sand fork VM --apply >> sand.yaml`` appends a manifest fragment: the apply's plan,
progress and summary are told on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Any

from sand.cli.applying import run_apply
from sand.cli.fork_entries import fork_entries, overlay, render_entries
from sand.defaults import PARALLELISM


def run(args: argparse.Namespace) -> int:
    entries = fork_entries(args.manifest, args.vm, args.count, args.prefix, memory=args.memory)
    if args.apply:
        return _apply(args, entries)
    sys.stdout.write(render_entries(entries, args.manifest))
    print(
        f"# {len(entries)} fork entr{'y' if len(entries) == 1 else 'ies'} of {args.vm}: add "
        f"them under `vms:` in {args.manifest} (nothing was written), then `sand apply`.",
        file=sys.stderr,
    )
    return 0


def _apply(args: argparse.Namespace, entries: list[dict[str, Any]]) -> int:
    """The forks created now: ``sand apply --target`` each of them, on the manifest with
    their entries added in memory. The file is not written, so the entries are printed
    after, whatever the apply did: a fork it made and the manifest does not declare is
    planned for deletion by the next apply (guarded as any delete)."""
    names = [str(entry["name"]) for entry in entries]
    loaded = overlay(args.manifest, entries)
    code = 1
    try:
        # The apply talks to the person on stderr: stdout is the entries alone.
        with contextlib.redirect_stdout(sys.stderr):
            code = run_apply(
                args.manifest,
                auto_approve=args.auto_approve,
                parallelism=PARALLELISM,
                allow_mass_delete=False,
                as_json=False,
                targets=names,
                loaded=loaded,
                command="fork",
            )
    finally:
        sys.stdout.write(render_entries(entries, args.manifest))
        made = "made" if code == 0 else "made (those this apply got to)"
        print(
            f"# {', '.join(names)}: {made} from {args.vm}, but NOT written to "
            f"{args.manifest}. Add the entries above under `vms:` now: "
            "the next `sand apply` of the file as it is plans every fork it does not declare "
            "as a VM to delete.",
            file=sys.stderr,
        )
    return code
