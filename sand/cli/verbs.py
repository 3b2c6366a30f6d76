"""Subcommands for working with one VM (shell, cp, land, publish).

Each parser sets ``handler`` to a function that imports its implementation
lazily, so building the parser stays cheap (no asyncssh, no backends).
"""

from __future__ import annotations

import argparse
from typing import Any

from sand.cli.completion import VM_NAMES, VM_PATHS, complete_files


def manifest_option(p: argparse.ArgumentParser) -> None:
    # -f/--file as on every command; --manifest kept for scripts written before.
    flag = p.add_argument(
        "-f",
        "--file",
        "--manifest",
        dest="manifest",
        default="sand.yaml",
        metavar="FILE",
        help="the manifest (default: ./sand.yaml)",
    )
    complete_files(flag)


def vm_argument(p: argparse.ArgumentParser, words: str) -> None:
    """The VM a command acts on: a name the manifest declares (completed from it)."""
    action = p.add_argument("vm", metavar="VM", help=f"{words} (a name in the manifest)")
    action.complete = VM_NAMES  # type: ignore[attr-defined]  # read by shtab


def add_verb_parsers(sub: Any) -> None:
    """Register the per-VM verbs on the main parser's subparsers."""
    p = sub.add_parser(
        "shell",
        help="a shell (or one command) in a VM, as its user",
        usage="sand shell [-f FILE] [--new] [--raw] VM [-- CMD...]",
        description="Without a command: attach the VM's persistent tmux session (named "
        "after the VM; created when missing), so what runs there survives a dropped "
        "connection. With -- CMD: run CMD alone, without tmux, and exit with its status.",
    )
    manifest_option(p)
    p.add_argument(
        "--new",
        action="store_true",
        help="start a new tmux session (VM-2, VM-3, ...) instead of attaching the VM's",
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="pass the command's output through byte for byte (binary pipelines); by "
        "default terminal control sequences are removed from it",
    )
    vm_argument(p, "the VM to open a shell in")
    # Not "command": that name holds the verb on the namespace (the parser's
    # subcommand dest), which sand's logs and its plan/validate switches read.
    command = p.add_argument(
        "guest_command",
        nargs=argparse.REMAINDER,
        metavar="CMD",
        help="optional, after --: run this alone (no tmux) and exit with its status",
    )
    command.required = False  # argparse counts a REMAINDER as required: "required: VM, CMD"
    p.set_defaults(handler=_shell)

    p = sub.add_parser(
        "cp",
        help="copy files between the host and a VM (the only way files cross)",
        usage="sand cp [-f FILE] [-r] SRC DST   (one of SRC, DST is VM:PATH)",
        description="Like cp -r: into DST when it is an existing directory, else as DST. "
        "Downloads never replace a host file and never follow guest symlinks.",
    )
    manifest_option(p)
    p.add_argument("-r", "--recursive", action="store_true", help="copy directories")
    src = p.add_argument("src", metavar="SRC", help="a host path, or VM:PATH in a VM")
    dst = p.add_argument("dst", metavar="DST", help="a host path, or VM:PATH in a VM")
    for side in (src, dst):
        side.complete = VM_PATHS  # read by shtab
    p.set_defaults(handler=_cp)

    p = sub.add_parser(
        "land",
        help="list a VM's git checkouts with push/PR state; open a draft PR with your gh",
        description="List the VM's git checkouts (a read-only sweep): branch, commits on "
        "no remote, dirty files, and each branch's pull request. --pr opens a draft PR for "
        "a pushed branch with the host's gh; --web prints (and opens) the compare URL. "
        "Only PR metadata reaches the host.",
    )
    manifest_option(p)
    vm_argument(p, "the VM whose checkouts to list")
    p.add_argument("path", nargs="?", metavar="PATH", help="the checkout --pr/--web act on")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--pr", action="store_true", help="open a draft PR with the host's gh")
    mode.add_argument("--web", action="store_true", help="print (and open) the compare URL")
    mode.add_argument(
        "--compare",
        action="store_true",
        help="VM (and PATH) are patterns (try-*): the forks they name side by side: each "
        "checkout's branch, commits and changes since the fork point, and agent state",
    )
    p.set_defaults(handler=_land)

    p = sub.add_parser(
        "wake",
        help="wake a VM that sleeps (idle, or sand sleep): resume or start it",
        description="Resume a VM hibernated for idle (Proxmox) or start one stopped for "
        "idle or by sand sleep (Lima, or --stop). sand shell, cp and land, the board's "
        "keys and an apply that must provision wake a sleeping VM by themselves; this is "
        "for waking it ahead of use.",
    )
    manifest_option(p)
    vm_argument(p, "the VM to wake")
    p.set_defaults(handler=_wake)

    p = sub.add_parser(
        "sleep",
        help="put a running VM to sleep now, as its idle policy would",
        description="Hibernate the VM (Proxmox: suspend to disk; memory, processes and "
        "tmux sessions kept) or, where the backend cannot (Lima) or with --stop, stop it "
        "(running processes and tmux sessions end; files and the agents' conversations "
        "stay on disk). It stays asleep, shown Synced (asleep), until sand wake or a use "
        "of it wakes it; an apply leaves it asleep unless it must change it.",
    )
    manifest_option(p)
    vm_argument(p, "the VM to put to sleep")
    p.add_argument(
        "--stop", action="store_true", help="stop it even where the backend could hibernate it"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="put it to sleep even while an agent works or a person is attached (otherwise "
        "refused, naming them)",
    )
    p.set_defaults(handler=_sleep)

    p = sub.add_parser(
        "publish",
        help="publish a VM checkout's commits to a drupal.org issue fork as a merge request",
        description="Replay a VM checkout's commits onto the drupal.org issue fork's "
        "branch and open a merge request, decided on the host: what would be pushed is "
        "shown first and sent only with your yes (or --yes).",
    )
    manifest_option(p)
    vm_argument(p, "the VM holding the checkout")
    p.add_argument("path", nargs="?", metavar="PATH", help="the checkout (default: the VM's repo)")
    p.add_argument("--issue", required=True, metavar="URL", help="the drupal.org issue's URL")
    p.add_argument("--branch", metavar="NAME", help="fork branch (default: NID-issue-title)")
    p.add_argument("--target-branch", metavar="NAME", help="default: the project's default")
    p.add_argument("--yes", action="store_true", help="publish without asking (after showing)")
    p.set_defaults(handler=_publish)


def _shell(args: argparse.Namespace) -> int:
    # here, not at the top: importing it loads pydantic and yaml
    from sand.cli.verb_commands import cmd_shell

    return cmd_shell(args)


def _cp(args: argparse.Namespace) -> int:
    # here, not at the top: importing it loads pydantic and yaml
    from sand.cli.verb_commands import cmd_cp

    return cmd_cp(args)


def _land(args: argparse.Namespace) -> int:
    # here, not at the top: importing it loads pydantic and yaml
    from sand.cli.verb_commands import cmd_land

    return cmd_land(args)


def _publish(args: argparse.Namespace) -> int:
    # here, not at the top: importing it loads pydantic and yaml
    from sand.cli.verb_commands import cmd_publish

    return cmd_publish(args)


def _wake(args: argparse.Namespace) -> int:
    # here, not at the top: importing it loads pydantic and yaml
    from sand.cli.verb_commands import cmd_wake

    return cmd_wake(args)


def _sleep(args: argparse.Namespace) -> int:
    # here, not at the top: importing it loads pydantic and yaml
    from sand.cli.verb_commands import cmd_sleep

    return cmd_sleep(args)
