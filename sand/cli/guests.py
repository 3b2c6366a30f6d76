"""What the commands that reach into one guest share, and the board borrows: the
endpoint with its host key pinned, ``ssh`` run for a person, ``VM:PATH`` read, and the
read-only sweeps of ``sand land`` (one VM, or forks side by side).

It imports the SSH transport at its top: only the commands that reach a guest (and
the board) load it, each through its own module in ``sand.cli.commands``."""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from sand import activity
from sand.desired import DesiredVM
from sand.errors import ErrorLayer, SandError
from sand.guest.endpoint import GuestEndpoint
from sand.guest.runner import SshRunner
from sand.guest.ssh import KnownHosts, host_key_alias, where
from sand.project import observe_all, open_session
from sand.terminal import one_line
from sand.verbs.compare import ForkView, read_fork, render
from sand.verbs.github import Gh
from sand.verbs.land import land
from sand.verbs.ledger import ledger_path
from sand.verbs.power import Note
from sand.verbs.shell import jump_config, ssh_argv
from sand.verbs.target import connect, resolve

_REMOTE_ARG = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*):(.*)$", re.S)


class UsageError(SandError):
    layer = ErrorLayer.CLI


def say(line: str) -> None:
    """What a verb tells the person besides its output: a wake ("waking agent-1, ...")."""
    print(line, file=sys.stderr, flush=True)


async def pinned_endpoint(manifest: str, vm: str, note: Note | None = say) -> GuestEndpoint:
    """The endpoint, its host key pinned first (the ssh client only checks pins)."""

    async with resolve(manifest, vm, note) as target:
        endpoint = target.endpoint
        if endpoint.host_key_policy == "pin" and not KnownHosts().keys(host_key_alias(endpoint)):
            async with connect(endpoint):
                pass
    return endpoint


def run_ssh(endpoint: GuestEndpoint, *, command: str | None = None, tty: bool = False) -> int:

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
