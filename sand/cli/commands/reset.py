"""``sand reset VM``: the VM replaced from its image, exactly ``sand apply --replace VM
--target VM``."""

from __future__ import annotations

import argparse

from sand.cli.applying import run_apply
from sand.errors import PlanRefused


def run(args: argparse.Namespace) -> int:
    """``sand reset VM``: the VM replaced from its image, its ``preserve:`` paths carried
    over — exactly ``sand apply --replace VM --target VM`` (same prompt, same guards)."""
    try:
        return _reset(args)
    except PlanRefused as exc:
        # The person typed `sand reset VM`, not the flags it stands for.
        message = str(exc)
        for flag in ("--replace", "--target"):
            message = message.replace(f"{flag} {args.vm!r}", f"sand reset {args.vm!r}", 1)
        raise PlanRefused(message) from None


def _reset(args: argparse.Namespace) -> int:
    return run_apply(
        args.manifest,
        auto_approve=args.auto_approve,
        parallelism=1,
        allow_mass_delete=False,
        as_json=False,
        progress_mode="log" if args.log_format == "json" else "auto",
        allow_data_loss=args.allow_data_loss,
        targets=[args.vm],
        replace_vms=[args.vm],
        command="reset",
    )
