"""The calls on one instance every operation is made of: limactl and the fixed scripts
beside it (errors worded once), start, sidecar writes, removal, the journal bracket,
and the refusals that come before any change."""

from __future__ import annotations

import json
from collections.abc import Sequence

from sand import activity
from sand.backends.lima import egress, scripts
from sand.backends.lima.context import Ctx
from sand.backends.lima.runner import Completed
from sand.errors import BackendError
from sand.manifest.backends.lima import RESERVED_PREFIX, LimaConfig
from sand.observed import ObservedVM, Ownership
from sand.terminal import quoted


def argv(ctx: Ctx, *args: str) -> list[str]:
    return [ctx.limactl, "--tty=false", *args]


def error(ctx: Ctx, res: Completed, what: str, hint: str = "") -> BackendError:
    tail = res.err_tail()
    msg = f"`{what}` failed on {ctx.runner.where} (exit {res.returncode})"
    if "\n" in tail:  # quoted: no line of limactl's may pass for one of sand's
        msg += f":\n{quoted(tail)}"
    elif tail:
        msg += f": {tail}"
    if hint:
        msg += f"\n{hint}"
    return BackendError(msg, backend=ctx.name)


async def limactl(
    ctx: Ctx, *args: str, stdin: bytes | None = None, timeout: float | None = None
) -> Completed:
    """Run ``limactl ARGS``; a failure raises, worded without the ``--set`` values.
    A call given its own ``timeout`` is a long one (create, clone, stop, delete): it is
    said as a step with that limit."""
    wait = ctx.timeouts.short if timeout is None else timeout
    shown = " ".join(a for a in args if not a.startswith("--set=") and len(a) < 80)
    if timeout is not None:
        activity.step(f"limactl {shown}", limit=wait)
    res = await ctx.runner.run(argv(ctx, *args), stdin=stdin, timeout=wait)
    if not res.ok:
        raise error(ctx, res, f"limactl {shown}")
    return res


async def script(
    ctx: Ctx, command: Sequence[str], *, stdin: bytes | None = None, what: str
) -> Completed:
    """Run one of the fixed scripts (``scripts.py``); a failure raises, naming ``what``."""
    res = await ctx.runner.run(command, stdin=stdin, timeout=ctx.timeouts.short)
    if not res.ok:
        raise error(ctx, res, what)
    return res


def set_flags(exprs: Sequence[str]) -> list[str]:
    out: list[str] = []
    for e in exprs:
        out.append(f"--set={e}")
    return out


async def create_instance(ctx: Ctx, name: str, body: str, sets: Sequence[str]) -> None:
    """limactl create from a generated lima.yaml, with the --set overrides Lima applies
    after merging templates (that is how the security keys win). The yaml reaches the
    host on stdin and limactl as a file, whole or not at all (``CREATE_FROM_STDIN``)."""
    if not ctx.created_one:
        async with ctx.first_create:  # Lima's first create makes its key (context.py)
            if not ctx.created_one:
                await _create(ctx, name, body, sets)
                ctx.created_one = True
                return
    await _create(ctx, name, body, sets)


async def _create(ctx: Ctx, name: str, body: str, sets: Sequence[str]) -> None:
    data = body.encode()
    activity.step(f"limactl create --name={name}", limit=ctx.timeouts.create)
    command = argv(ctx, "create", f"--name={name}", *set_flags(sets))
    res = await ctx.runner.run(
        scripts.create_from_stdin_argv(len(data), name, command),
        stdin=data,
        timeout=ctx.timeouts.create,
    )
    if not res.ok:
        raise error(ctx, res, f"limactl create --name={name}")


async def start(ctx: Ctx, name: str) -> None:
    activity.step(f"limactl start {name}", limit=ctx.timeouts.start)
    # A VM with an egress policy starts through sand's QEMU shim, whoever asks for the start.
    env = egress.start_env(ctx, name)
    res = await ctx.runner.run(argv(ctx, "start", name), env=env, timeout=ctx.timeouts.start)
    if res.ok:
        return
    log = ""
    tail = await ctx.runner.run(scripts.tail_argv(name, "ha.stderr.log"), timeout=30)
    if tail.ok and tail.stdout.strip():
        text = host_agent_log(tail.stdout.decode(errors="replace"))
        log = "last lines of ha.stderr.log:\n" + quoted(text)
    raise error(ctx, res, f"limactl start {name}", log)


def host_agent_log(text: str) -> str:
    """The host agent's log as a person reads it: Lima writes JSON lines
    (``{"level": ..., "msg": ..., "time": ...}``); each becomes ``level: msg``,
    anything else stays as it is."""
    lines = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            entry = None
        if isinstance(entry, dict) and isinstance(entry.get("msg"), str):
            lines.append(f"{entry.get('level') or 'log'}: {entry['msg']}")
        else:
            lines.append(line)
    return "\n".join(lines) + "\n" if lines else ""


async def stop(ctx: Ctx, name: str) -> None:
    await limactl(ctx, "stop", name, timeout=ctx.timeouts.stop)


async def remove(ctx: Ctx, name: str, *, readable: bool) -> None:
    """Delete an instance: by limactl when it has a lima.yaml, else its half-made
    directory by script (limactl cannot read it to delete it)."""
    if readable:
        await limactl(ctx, "delete", "--force", name, timeout=ctx.timeouts.stop)
    else:
        await script(ctx, scripts.remove_half_made_argv(name), what=f"remove {name}")


async def write_sidecar(ctx: Ctx, name: str, filename: str, data: bytes) -> None:
    await script(
        ctx,
        scripts.write_sidecar_argv(name, filename, len(data)),
        stdin=data,
        what=f"write {filename} for {name}",
    )


def check_name(ctx: Ctx, name: str) -> None:
    problem = LimaConfig.name_problem(name)
    if problem:
        raise BackendError(problem, backend=ctx.name)


def require_managed(ctx: Ctx, current: ObservedVM, action: str) -> None:
    if current.ownership is not Ownership.MANAGED:
        raise BackendError(
            f"refusing to {action} {current.name}: it is {current.ownership.value}, not "
            "managed by this project",
            backend=ctx.name,
        )
    if current.name.startswith(RESERVED_PREFIX):
        raise BackendError(f"refusing to {action} sand's base {current.name}", backend=ctx.name)
