"""``sand destroy``: every VM of the project deleted, behind apply's question and guards."""

from __future__ import annotations

import argparse

from sand.cli.applying import run_apply
from sand.defaults import PARALLELISM


def run(args: argparse.Namespace) -> int:
    return run_apply(
        args.manifest,
        auto_approve=args.auto_approve,
        parallelism=PARALLELISM,
        allow_mass_delete=True,
        as_json=False,
        destroy=True,
        allow_data_loss=args.allow_data_loss,
        command="destroy",
    )
