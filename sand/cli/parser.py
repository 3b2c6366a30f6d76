"""The ``sand`` argument parser: every subcommand with a description, every argument
with its help (``sand COMMAND --help`` is the reference a person reaches first).

Building it imports nothing heavy; each command's ``handler`` is imported when it runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from sand import __version__, defaults
from sand.cli.completion import VM_NAMES, complete_files
from sand.cli.flags import (
    DEBOUNCE,
    GUEST_TIMEOUT,
    INTERVAL,
    LEASE_WAIT,
    SandParser,
    add_apply_flags,
    add_global_flags,
    add_global_flags_to_subcommands,
    add_manifest_args,
)
from sand.cli.fork import add_fork_parser
from sand.cli.sync import add_sync_parser
from sand.cli.template import add_template_parser
from sand.cli.verbs import add_verb_parsers, manifest_option, vm_argument

OUTPUT_SCHEMAS = ("plan", "status", "apply")
Subcommands = Any  # argparse's _SubParsersAction, private and generic in the parser class


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's parser; with ``only``, that command's alone (when it is one):
    the ~40 others cost each run ~4 ms to build for nothing."""
    parser = SandParser(
        prog="sand",
        description="Keep disposable agent dev VMs (Lima, Proxmox VE) in the state a "
        "manifest declares: validate, plan, apply; status, doctor and a live board; per-VM "
        "shell, cp, land and publish. `sand COMMAND --help` describes each command.",
    )
    parser.add_argument("--version", action="version", version=f"sand {__version__}")
    add_global_flags(parser)
    every = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub: Subcommands = every if only is None else _OnlyOne(every, only)
    _add_checks(sub)
    _add_plan_and_apply(sub)
    _add_views(sub)
    add_verb_parsers(sub)
    add_fork_parser(sub)
    add_template_parser(sub)
    add_sync_parser(sub)
    p = sub.add_parser(
        "completion",
        help="print a shell completion script",
        description="Print a completion script for bash, zsh or fish: subcommands, flags, "
        "file names, and the VM names of the manifest being completed (read locally, no "
        "backend contacted).",
    )
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete for")
    add_global_flags_to_subcommands(parser)  # last: every subcommand takes them
    return parser


def subcommands(parser: argparse.ArgumentParser) -> set[str]:
    """The names of the commands ``parser`` has a parser for."""
    return {
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }


class _Unbuilt:
    """A parser (or argument, or group) of a command that does not run: whatever is
    asked of it is taken and dropped."""

    def __getattr__(self, _name: str) -> Any:
        return self

    def __call__(self, *_args: Any, **_kwargs: Any) -> Any:
        return self


class _OnlyOne:
    """The subcommands action, building the parser of one command only."""

    def __init__(self, sub: Subcommands, command: str) -> None:
        self.sub, self.command = sub, command

    def add_parser(self, name: str, **kwargs: Any) -> Any:
        if name == self.command:
            return self.sub.add_parser(name, **kwargs)
        return _Unbuilt()


def _add_checks(sub: Subcommands) -> None:
    p = sub.add_parser(
        "validate",
        help="check manifests without contacting any backend",
        description="Check each manifest (several, or - for stdin) as plan would read it, "
        "without contacting a backend: every problem with its FILE:LINE:COL. Exit 1 when "
        "any is invalid.",
    )
    manifests = p.add_argument(
        "manifests",
        nargs="*",
        metavar="MANIFEST",
        help="the manifests to check; - reads one from stdin (default: ./sand.yaml)",
    )
    flag = p.add_argument(
        "-f",
        "--file",
        "--manifest",
        dest="manifest_files",
        action="append",
        default=[],
        metavar="MANIFEST",
        help="a manifest to check (repeatable), as with the other commands",
    )
    complete_files(manifests, flag)
    p.add_argument(
        "--json",
        action="store_true",
        help="a JSON list on stdout: per file, valid or not and its problems (file, "
        "line, column, message)",
    )
    p = sub.add_parser(
        "schema",
        help="print the manifest's JSON Schema (or an output's, with --output)",
        description="Print the JSON Schema of the manifest, for an editor "
        "(yaml-language-server) or a validator; with --output, the schema of a command's "
        "JSON output instead.",
    )
    p.add_argument(
        "--output",
        choices=OUTPUT_SCHEMAS,
        help="the schema of `sand plan --json`, `sand status --json` or the lines of "
        "`sand apply --json`",
    )
    p = sub.add_parser(
        "doctor",
        help="check backend credentials and permissions",
        description="Contact each backend the manifest names and check what sand needs "
        "there: reachable, credentials accepted, privileges, storage, templates, tools. "
        "One line per problem, naming its backend; `ok` for a backend with none.",
    )
    add_manifest_args(p)


def _data_loss_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--allow-data-loss",
        action="store_true",
        help="delete or replace VMs even when their checkouts hold unpushed work "
        "(or they cannot be swept); never implied by --watch",
    )


def _approve_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--auto-approve",
        action="store_true",
        help="do not ask for confirmation (needed without a terminal)",
    )


def _steering_flags(p: argparse.ArgumentParser) -> None:
    for flag, words in (
        ("--target", "plan and apply only this VM (repeatable); the others are left as they are"),
        (
            "--replace",
            "replace this VM although nothing changed (repeatable); preserve: paths are "
            "carried over",
        ),
    ):
        action = p.add_argument(flag, action="append", default=[], metavar="VM", help=words)
        action.complete = VM_NAMES  # type: ignore[attr-defined]  # read by shtab


def _add_plan_and_apply(sub: Subcommands) -> None:
    p = sub.add_parser(
        "plan",
        help="show what apply would do",
        description="Observe the backends (read-only) and print what apply would change, "
        "in Terraform's symbols (+ create, ~ change, -/+ replace, - destroy, ! blocked). "
        "Exit 1 when a backend is unknown or a change is blocked; with "
        "--detailed-exitcode, 2 when changes are pending.",
    )
    add_manifest_args(p)
    p.add_argument("--json", action="store_true", help="the plan as JSON on stdout")
    p.add_argument("--detailed-exitcode", action="store_true", help="exit 2 when changes pend")
    p.add_argument("--refresh-only", action="store_true", help="report drift, propose nothing")
    out = p.add_argument(
        "--out", metavar="FILE", help="save the plan for a later 'sand apply FILE'"
    )
    complete_files(out)
    _data_loss_flag(p)
    _steering_flags(p)

    p = sub.add_parser(
        "apply",
        help="make the VMs match the manifest",
        description="Plan, ask, then create, change, replace and delete VMs until they "
        "match the manifest, and provision their guests; a saved plan (plan --out) runs "
        "only while nothing changed. With --watch: again on every save of the manifest.",
    )
    add_manifest_args(p, plan_file=True)
    _approve_flag(p)
    p.add_argument("--json", action="store_true", help="plan and results as JSON on stdout")
    add_apply_flags(p)
    _data_loss_flag(p)
    _steering_flags(p)
    p.add_argument(
        "--lease-wait",
        type=LEASE_WAIT,
        default=0.0,
        metavar="S",
        help="wait up to S seconds while another applier holds the project's lease "
        "(default 0: fail at once, naming it)",
    )
    p.add_argument("--watch", action="store_true", help="re-apply on every manifest save")
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=defaults.INTERVAL,
        metavar="S",
        help=f"watch: re-observe every S seconds, 0.5 to 86400 (default {defaults.INTERVAL:g})",
    )
    p.add_argument(
        "--debounce",
        type=DEBOUNCE,
        default=defaults.DEBOUNCE,
        metavar="S",
        help="watch: seconds a save settles before the re-plan, 0 to 60 "
        f"(default {defaults.DEBOUNCE:g})",
    )

    p = sub.add_parser(
        "destroy",
        help="delete every VM this manifest's project manages",
        description="Delete every VM the project manages, after the same confirmation as "
        "apply; protected VMs and VMs holding unpushed work are kept and named.",
    )
    add_manifest_args(p)
    _approve_flag(p)
    _data_loss_flag(p)

    p = sub.add_parser(
        "reset",
        help="replace a VM from its image, keeping its preserve: paths",
        description="Replace one VM from its image, carrying its preserve: paths over: "
        "the same run as `sand apply --replace VM --target VM` (same prompt, same guards).",
    )
    vm_argument(p, "the VM to replace")
    manifest_option(p)
    _approve_flag(p)
    _data_loss_flag(p)


def _add_views(sub: Subcommands) -> None:
    p = sub.add_parser(
        "status",
        help="desired vs observed, per VM",
        description="One row per VM: desired and observed state, and the Synced, Healthy "
        "and Provisioned conditions; the project's leases. Read-only; exit 1 when a "
        "backend could not be observed.",
    )
    add_manifest_args(p)
    p.add_argument("--json", action="store_true", help="the rows as JSON on stdout")
    p.add_argument(
        "--deep",
        action="store_true",
        help="also check each running guest over SSH (reachable, its agents installed, "
        "its secrets on tmpfs) for Healthy; without it no guest is contacted",
    )
    p.add_argument(
        "--timeout",
        type=GUEST_TIMEOUT,
        metavar="S",
        help="--deep: seconds each guest gets to answer, up to 3600 (default 45)",
    )

    p = sub.add_parser(
        "ui",
        help="a live board of the fleet: status, plan, apply, shell, land",
        description="A terminal board of the fleet, re-observed every --interval seconds: "
        "each VM's state and conditions; keys to plan, apply, open a shell or land work.",
    )
    add_manifest_args(p)
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=defaults.BOARD_INTERVAL,
        metavar="S",
        help="re-observe every S seconds, 0.5 to 86400 (one listing per backend; "
        f"default {defaults.BOARD_INTERVAL:g})",
    )
    p.add_argument(
        "--watch",
        action="store_true",
        help="re-plan on every manifest save and show drift as it is found; drift is "
        "corrected only with selfHeal: true",
    )
