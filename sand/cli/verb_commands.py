"""The verbs' CLI handlers: resolve the VM, connect, call the verb, map the result
to an exit code. Imported only when one of these subcommands runs (the parsers are
in ``sand.cli.verbs``; the verbs themselves, which know nothing of a command line,
in ``sand.verbs``)."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from sand import activity
from sand.cli.confirm import confirm
from sand.cli.waits import shown_while_waiting
from sand.errors import ErrorLayer, SandError
from sand.guest.endpoint import GuestEndpoint
from sand.terminal import one_line
from sand.verbs.target import Target, connect, resolve

if TYPE_CHECKING:
    from collections.abc import Callable

    from sand.desired import DesiredVM
    from sand.verbs.compare import ForkView
    from sand.verbs.drupal import Issue
    from sand.verbs.forge import GitLab
    from sand.verbs.power import Note
    from sand.verbs.publish import PublishPlan

_REMOTE_ARG = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):(.*)$", re.S)


class UsageError(SandError):
    layer = ErrorLayer.CLI


def cmd_shell(args: argparse.Namespace) -> int:
    raw = bool(getattr(args, "raw", False))
    new = bool(getattr(args, "new", False))
    command = list(args.guest_command)
    if command and command[0] in ("--new", "--raw"):
        # argparse hands everything after VM to the command; no guest program is
        # called --new, so this is the option written in the wrong place.
        raise UsageError(f"put {command[0]} before the VM: sand shell {command[0]} VM")
    if command:
        if new:
            raise UsageError("--new is for the interactive shell; -- CMD runs without tmux")
        with shown_while_waiting(args.vm):
            return asyncio.run(_shell_command(args.manifest, args.vm, command, raw))
    if raw:
        raise UsageError(
            "--raw is for a command (sand shell --raw VM -- CMD); an interactive shell is "
            "your terminal talking to the guest's, byte for byte"
        )
    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.shell import tmux_command

    with shown_while_waiting(args.vm):
        endpoint = asyncio.run(pinned_endpoint(args.manifest, args.vm))
    # The guest's tmux session is what survives a dropped connection; ssh asks for a
    # terminal for it only when there is one here (else the guest gives a plain shell).
    return run_ssh(endpoint, command=tmux_command(args.vm, new=new), tty=sys.stdin.isatty())


async def _shell_command(manifest: str, vm: str, argv: list[str], raw: bool) -> int:
    # here, not at the top: importing it loads asyncssh and cryptography
    from sand.guest.stream import run_streaming

    async with resolve(manifest, vm, say) as target, connect(target.endpoint) as conn:
        activity.reached()
        return await run_streaming(conn, argv, raw=raw)


def say(line: str) -> None:
    """What a verb tells the person besides its output: a wake ("waking agent-1, ...")."""
    print(line, file=sys.stderr, flush=True)


async def pinned_endpoint(manifest: str, vm: str, note: Note | None = say) -> GuestEndpoint:
    """The endpoint, its host key pinned first (the ssh client only checks pins)."""
    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.guest.ssh import KnownHosts, host_key_alias

    async with resolve(manifest, vm, note) as target:
        endpoint = target.endpoint
        if endpoint.host_key_policy == "pin" and not KnownHosts().keys(host_key_alias(endpoint)):
            async with connect(endpoint):
                pass
    return endpoint


def run_ssh(endpoint: GuestEndpoint, *, command: str | None = None, tty: bool = False) -> int:
    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.guest.ssh import KnownHosts, host_key_alias

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.shell import jump_config, ssh_argv

    with tempfile.TemporaryDirectory(prefix="sand-ssh-") as scratch:
        config = None
        if endpoint.jump is not None:
            config = Path(scratch) / "ssh_config"
            fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(jump_config(endpoint.jump))
        argv = ssh_argv(
            endpoint,
            known_hosts=KnownHosts().path,
            alias=host_key_alias(endpoint),
            config=config,
            command=command,
            tty=tty,
        )
        return subprocess.run(argv, check=False).returncode


def split_remote(arg: str) -> tuple[str | None, str]:
    """``VM:PATH`` → (VM, PATH); anything else is a host path (write ``./a:b`` for a
    host file with a colon in its name)."""
    m = _REMOTE_ARG.match(arg)
    return (m[1], m[2] or "~") if m else (None, arg)


def cmd_cp(args: argparse.Namespace) -> int:
    src_vm, src = split_remote(args.src)
    dst_vm, dst = split_remote(args.dst)
    if (src_vm is None) == (dst_vm is None):
        raise UsageError("sand cp copies between the host and one VM: write VM:PATH on one side")
    with shown_while_waiting(src_vm or dst_vm or ""):
        return asyncio.run(_cp(args.manifest, src_vm, src, dst_vm, dst, args.recursive))


async def _cp(
    manifest: str, src_vm: str | None, src: str, dst_vm: str | None, dst: str, recursive: bool
) -> int:
    # here, not at the top: importing it loads asyncssh and cryptography
    from sand.guest.sftp import GuestRefused, open_sftp

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.copy import download, upload

    def report(line: str) -> None:
        print(one_line(line, 4000), file=sys.stderr)  # it names guest files

    vm = src_vm or dst_vm
    assert vm is not None
    try:
        async with (
            resolve(manifest, vm, say) as target,
            connect(target.endpoint) as conn,
            open_sftp(conn) as fs,
        ):
            activity.reached()
            if src_vm is not None:
                summary = await download(fs, src, dst, recursive=recursive, report=report)
                verb = "downloaded"
            else:
                summary = await upload(fs, Path(src), dst, recursive=recursive, report=report)
                verb = "uploaded"
    except OSError as exc:
        raise UsageError(f"sand cp: {exc}") from None
    except GuestRefused as exc:
        raise UsageError(f"sand cp: the guest refused: {one_line(exc.reason)}") from None
    print(summary.describe(verb), file=sys.stderr)
    return 0


def cmd_land(args: argparse.Namespace) -> int:
    with shown_while_waiting(args.vm):
        return asyncio.run(_land(args))


async def _land(args: argparse.Namespace) -> int:
    if args.compare:
        patterns = [args.vm, *([args.path] if args.path else [])]
        return await compare_vms(args.manifest, patterns)
    return await land_vm(args.manifest, args.vm, path=args.path, open_pr=args.pr, web=args.web)


async def land_vm(
    manifest: str,
    vm: str,
    *,
    path: str | None = None,
    open_pr: bool = False,
    web: bool = False,
    out: TextIO = sys.stdout,
    note: Note | None = say,
) -> int:
    """``sand land VM``: the guest's checkouts swept and told to ``out`` (the board of
    ``sand ui`` passes its own), the ledger appended."""
    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.guest.runner import SshRunner

    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.guest.ssh import where

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.github import Gh

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.land import land

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.ledger import ledger_path

    async with resolve(manifest, vm, note) as target, connect(target.endpoint) as conn:
        activity.reached()
        return await land(
            SshRunner(conn, "landing sweep", where=where(target.endpoint)),
            vm=target.vm.name,
            repo_paths=[r.path for r in target.vm.repos],
            ledger_file=ledger_path(target.project),
            gh=Gh.find(),
            path=path,
            open_pr=open_pr,
            web=web,
            out=out,
        )


async def compare_vms(manifest: str, patterns: list[str], out: TextIO = sys.stdout) -> int:
    """``sand land --compare try-*``: the declared VMs the patterns name, told side by
    side (:func:`fork_views`); exit 1 when one of them could not be read."""
    import fnmatch
    import time

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.compare import render

    def named(vm: str) -> bool:
        return any(fnmatch.fnmatchcase(vm, p) for p in patterns)

    views = await fork_views(manifest, named, " ".join(patterns))
    out.write(render(views, time.time()))
    return 0 if all(not v.problem for v in views) else 1


async def fork_views(
    manifest: str | Path, named: Callable[[str], bool], asked: str
) -> list[ForkView]:
    """The declared VMs ``named`` picks, each read in one exchange with its guest (all
    at once), in the manifest's order: what ``sand land --compare`` and the board's
    compare view show. A VM that is not running, or does not answer, has its view say
    so; asleep ones are not woken. ``asked``: what picked them, for the error."""
    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.guest.runner import SshRunner

    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.guest.ssh import where

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.project import observe_all, open_session
    from sand.verbs.compare import ForkView, read_fork

    session = open_session(manifest, lock=False)
    try:
        vms = [v for v in session.desired.vms if named(v.name)]
        if not vms:
            known = ", ".join(v.name for v in session.desired.vms) or "none"
            raise UsageError(f"{manifest} declares no VM matching {asked} (VMs: {known})")
        backends = {v.backend: session.backends[v.backend] for v in vms}
        seen = await observe_all(backends, session.desired)

        async def one(vm: DesiredVM) -> ForkView:
            obs = seen[vm.backend]
            if obs.unknown_reason:
                return ForkView(vm.name, problem=f"backend {vm.backend}: {obs.unknown_reason}")
            current = next((o for o in obs.managed() if o.name == vm.name), None)
            if current is None or current.power != "running":
                state = "does not exist yet" if current is None else f"is {current.power}"
                return ForkView(vm.name, problem=f"the VM {state}")
            try:
                endpoint = await session.backends[vm.backend].endpoint(vm, current)
                async with connect(endpoint) as conn:
                    runner = SshRunner(conn, "fork comparison", where=where(endpoint))
                    return await read_fork(runner, vm.name, [r.path for r in vm.repos])
            except SandError as exc:
                return ForkView(vm.name, problem=one_line(str(exc), 160))

        return list(await asyncio.gather(*(one(v) for v in vms)))
    finally:
        await session.close()


def cmd_publish(args: argparse.Namespace) -> int:
    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.drupal import (
        DrupalSites,
        PublishRefused,
        parse_issue_url,
        read_token,
        token_path,
    )

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.forge import GitLab

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.publish import confirm_and_execute

    token = read_token(token_path())  # before anything else: no token, no work
    if not args.yes and not sys.stdin.isatty():
        raise PublishRefused(
            "publishing needs a person to confirm, and stdin is not a terminal: run it in a "
            "terminal, or pass --yes to confirm without being asked"
        )
    sites = DrupalSites()
    issue = parse_issue_url(args.issue, sites)
    with shown_while_waiting(args.vm):
        plan = asyncio.run(_prepare_publish(args, issue, GitLab(sites.api)))
    result = confirm_and_execute(
        plan,
        GitLab(sites.api, token),
        out=sys.stdout,
        confirm=lambda q: confirm(q, assumed=args.yes),
    )
    return 0 if result is not None else 1  # None: the person said no


async def _prepare_publish(args: argparse.Namespace, issue: Issue, forge: GitLab) -> PublishPlan:
    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.guest.runner import SshRunner

    # here, not at the top: importing it loads asyncssh, cryptography, rich, structlog and tenacity
    from sand.guest.ssh import where

    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.verbs.publish import prepare

    async with resolve(args.manifest, args.vm, say) as target:
        checkout = args.path or _only_repo(target)
        async with connect(target.endpoint) as conn:
            activity.reached()
            return await prepare(
                SshRunner(conn, "publish", where=where(target.endpoint)),
                checkout,
                issue,
                forge,
                branch=args.branch,
                target_branch=args.target_branch,
            )


def _only_repo(target: Target) -> str:
    paths = [r.path for r in target.vm.repos]
    if len(paths) != 1:
        listed = ", ".join(paths) or "none declared"
        raise UsageError(f"name the checkout to publish (the VM's repos: {listed})")
    return paths[0]


def cmd_wake(args: argparse.Namespace) -> int:
    """``sand wake VM``: a VM asleep (idle, or ``sand sleep``) resumed or started."""
    with shown_while_waiting(args.vm):
        print(asyncio.run(_power(args.manifest, args.vm, wake=True)))
    return 0


def cmd_sleep(args: argparse.Namespace) -> int:
    """``sand sleep VM``: hibernated where the backend can (``--stop``: stopped)."""
    with shown_while_waiting(args.vm):
        slept = _power(args.manifest, args.vm, wake=False, stop=args.stop, force=args.force)
        print(asyncio.run(slept))
    return 0


async def _power(
    manifest: str, name: str, *, wake: bool, stop: bool = False, force: bool = False
) -> str:
    # here, not at the top: sand shell/cp/land/publish starts without it
    from sand.project import open_session
    from sand.verbs.power import asleep, find_vm, sleep_now, wake_if_asleep

    session = open_session(manifest, lock=False)
    try:
        vm, current = await find_vm(session, manifest, name)
        if not wake:
            how = await sleep_now(session, vm, current, stop=stop, force=force, note=say)
            return f"{name} is asleep ({how}); sand wake {name}, or any use of it, wakes it"
        if asleep(session, current) is None:
            return f"{name} is not asleep ({current.power}): nothing to wake"
        await wake_if_asleep(session, vm, current, say)
        return f"{name} is awake"
    finally:
        await session.close()
