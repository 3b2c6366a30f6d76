"""``sand apply``: one apply run, or with ``--watch`` one on every save of the manifest."""

from __future__ import annotations

import argparse

from sand.cli.applying import run_apply
from sand.cli.watch import watch
from sand.errors import PlanRefused


def run(args: argparse.Namespace) -> int:
    if args.watch:
        if args.allow_data_loss:
            raise PlanRefused(
                "--allow-data-loss is never used with --watch: a save must not destroy work"
            )
        if args.target or args.replace:
            raise PlanRefused("--target and --replace are for one apply, never with --watch")
        return watch(args)
    return run_apply(
        args.manifest,
        auto_approve=args.auto_approve,
        parallelism=args.parallelism,
        allow_mass_delete=args.allow_mass_delete,
        as_json=args.json,
        progress_mode="log" if args.log_format == "json" else "auto",
        allow_data_loss=args.allow_data_loss,
        targets=args.target,
        replace_vms=args.replace,
        lease_wait=args.lease_wait,
    )
