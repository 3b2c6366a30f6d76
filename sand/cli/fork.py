"""``sand fork VM --count N``: the manifest entries of N forks of a VM, printed.

It writes nothing: the manifest stays the one source of the fleet, so the entries are
printed to be added under ``vms:`` (a VM the manifest leaves out is deleted by the next
apply). The entries are checked as the manifest's own would be, on the manifest they
would join: a name a backend refuses, ``--memory`` on Lima. docs/fork-and-pools.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from sand.cli.flags import Number
from sand.cli.verbs import manifest_option, vm_argument

MAX_FORKS = 64  # --count is bounded here, as the parser reads it


def add_fork_parser(sub: Any) -> None:
    p = sub.add_parser(
        "fork",
        help="print the manifest entries of N forks of a VM (writes nothing)",
        usage="sand fork [-f FILE] [--count N] [--prefix P] [--memory] VM",
        description="Print N entries `- name: P<i>` / `from: {vm: VM}` to add under "
        "`vms:`; each is created, at the next apply, from VM as it is then (its repos on a "
        "branch fork/<name>), and then lives its own life. Nothing is written: "
        "`sand fork VM --count 3 >> sand.yaml` appends them when `vms:` is the file's "
        "last section.",
    )
    manifest_option(p)
    p.add_argument(
        "--count",
        type=Number(1, MAX_FORKS, whole=True),
        default=1,
        metavar="N",
        help=f"how many forks, 1-{MAX_FORKS}",
    )
    p.add_argument(
        "--prefix",
        metavar="P",
        help="their names: P1, P2, ... skipping names the manifest uses (default: VM-fork-)",
    )
    p.add_argument(
        "--memory",
        action="store_true",
        help="Proxmox: fork the source's memory too (snapshot: memory)",
    )
    p.add_argument(
        "--apply",
        action="store_true",
        help="also create them now (an apply targeted at them, with the entries added to "
        "the manifest in memory only): add the printed entries to the file afterwards, or "
        "the next apply plans them as VMs to delete",
    )
    p.add_argument("--auto-approve", action="store_true", help="with --apply: apply without asking")
    vm_argument(p, "the VM to fork")
    p.set_defaults(handler=_fork)


def _fork(args: argparse.Namespace) -> int:
    # here, not at the top: importing it loads pydantic and yaml
    from sand.cli.fork_entries import fork_entries, render_entries

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
    # here, not at the top: importing them loads pydantic, yaml and the backends
    from sand.cli.apply import run_apply
    from sand.cli.fork_entries import overlay, render_entries
    from sand.defaults import PARALLELISM

    names = [str(entry["name"]) for entry in entries]
    loaded = overlay(args.manifest, entries)
    code = 1
    try:
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
        sys.stdout.write("\n" + render_entries(entries, args.manifest))
        made = "made" if code == 0 else "made (those this apply got to)"
        print(
            f"# {', '.join(names)}: {made} from {args.vm}, but NOT written to "
            f"{args.manifest}. Add the entries above under `vms:` now: "
            "the next `sand apply` of the file as it is plans every fork it does not declare "
            "as a VM to delete.",
            file=sys.stderr,
        )
    return code
