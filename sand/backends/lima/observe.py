"""Observing Lima: the one listing per reconcile, and the per-name reads operations make.

The listing is a fixed script that runs ``limactl list --json`` once and prints sand's
sidecar files next to it (one SSH exec when remote). Everything the planner compares
comes from it (``cpus``, ``memory``, ``disk``, status, ``protected``, the resolved
``config``) plus the marker, so there are no per-VM reads while observing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from sand.backends.lima import golden_marks as golden
from sand.backends.lima import limayaml, scripts, vmops
from sand.backends.lima.context import Ctx
from sand.backends.lima.listing import (
    MIN_VERSION,
    LimaInstance,
    ListingError,
    parse_frames,
    parse_list,
    version_tuple,
)
from sand.backends.lima.marker import (
    BaseStamp,
    Classification,
    Sidecar,
    classify,
    parse_base_stamp,
    parse_sidecar,
)
from sand.backends.lima.runner import Completed
from sand.backends.lima.shared import SharedReads
from sand.backends.lima.vmops import error
from sand.errors import BackendError, SandError
from sand.manifest.backends.lima import RESERVED_PREFIX
from sand.observed import SLEEP_WAYS, Observation, ObservedVM, Ownership, SleepMark


@dataclass
class Inspected:
    """One instance as read by a (per-name) observe call."""

    instance: LimaInstance | None
    sidecar: Sidecar | None = None
    base_stamp: BaseStamp | None = None
    agent_started: float | None = None


async def observe(ctx: Ctx) -> Observation:
    ctx.seen = None
    want_version = not ctx.version_checked
    argv = scripts.observe_argv(ctx.limactl, version=want_version)
    res = await ctx.runner.run(argv, env={"LC_ALL": "C"}, timeout=ctx.timeouts.list)
    if not res.ok:
        return _unknown(ctx, f"the listing script failed (exit {res.returncode}): {res.err_tail()}")
    try:
        frames = parse_frames(res.stdout)
    except ListingError as exc:
        return _unknown(ctx, str(exc))
    if want_version:
        ctx.version_checked = True
        if frames.version is not None:
            ctx.version_warnings = _version_warning(ctx, frames.version)
    warnings = list(ctx.version_warnings)
    if frames.list_rc != 0:
        tail = res.err_tail()
        hint = ""
        if "lima.yaml" in tail:
            hint = (
                " (an instance directory without lima.yaml: one is being cloned or deleted;"
                " Lima before 2.2.0 then fails the whole listing, lima-vm/lima#5236)"
            )
        return _unknown(
            ctx,
            f"`limactl list --json` failed on {ctx.runner.where} (exit {frames.list_rc})"
            f"{hint}: {tail}",
            warnings,
        )
    try:
        instances = parse_list(frames.list_stdout)
    except ListingError as exc:
        return _unknown(ctx, f"{exc} (on {ctx.runner.where})", warnings)
    ctx.seen = {inst.name for inst in instances}
    ctx.lease_seen = frames.leases.get(ctx.project, b"").decode(errors="replace").strip()
    vms: list[ObservedVM] = []
    unreadable: list[str] = []
    golden_bases: list[tuple[LimaInstance, BaseStamp | None]] = []
    sidecars: list[Sidecar] = []
    for inst in instances:
        if not inst.readable:
            unreadable.append(inst.name)
        if inst.name.startswith(RESERVED_PREFIX):
            stamp_raw = frames.files.get((inst.name, scripts.BASE_STAMP_FILE))
            stamp = parse_base_stamp(stamp_raw) if stamp_raw is not None else None
            if golden.is_golden(ctx, inst, stamp) or golden.is_retired(ctx, inst, stamp):
                golden_bases.append((inst, stamp))
            continue  # bases are sand's plumbing, never VMs
        raw = frames.files.get((inst.name, scripts.MARKER_FILE))
        sidecar = parse_sidecar(raw) if raw is not None else None
        if sidecar is not None:
            sidecars.append(sidecar)
        slept = parse_asleep(frames.files.get((inst.name, scripts.ASLEEP_FILE)))
        vms.append(observed(ctx, inst, sidecar, frames.host_agent_started.get(inst.name), slept))
    made = golden.made_from(sidecars)
    bases = tuple(golden.observed_base(ctx, inst, stamp, made) for inst, stamp in golden_bases)
    ctx.golden = {b.fingerprint: b.identity for b in bases if b.ready}
    reason = None
    if unreadable:
        names = ", ".join(sorted(unreadable))
        reason = (
            f"instance {names} on {ctx.runner.where} has no readable lima.yaml (being "
            "cloned or deleted?); every instance there is unknown this run "
            "(lima-vm/lima#5236)"
        )
    return Observation(
        backend=ctx.name,
        vms=tuple(vms),
        unknown_reason=reason,
        unknown_because=tuple(sorted(unreadable)),
        requests=1,
        warnings=tuple(warnings),
        reboots_visible=False,  # a reboot inside the guest keeps the host agent
        bases=bases,
    )


def _unknown(ctx: Ctx, reason: str, warnings: Sequence[str] = ()) -> Observation:
    return Observation(
        backend=ctx.name,
        vms=(),
        unknown_reason=reason,
        requests=1,
        warnings=tuple(warnings),
    )


def _version_warning(ctx: Ctx, text: str) -> list[str]:
    v = version_tuple(text)
    if v and v < MIN_VERSION:
        return [
            f"limactl {'.'.join(map(str, v))} on {ctx.runner.where} is older than 2.2.0: "
            "its listing fails while any instance is being cloned or deleted "
            "(lima-vm/lima#5236), and sand then leaves that host alone for the run"
        ]
    return []


def boot_token(agent_pid: int, agent_started: float | None) -> str:
    """Names one start of a Lima instance: its host agent's pid and start second.

    Lima's host agent writes a new cloud-init instance-id at every start, so the guest
    makes new SSH host keys at every start; the guest's key pin follows this token.
    """
    parts = [str(agent_pid)] if agent_pid else []
    if agent_started is not None:
        parts.append(str(int(agent_started)))
    return "-".join(parts)


def parse_asleep(raw: bytes | None) -> SleepMark | None:
    """The instance's sleep sidecar (``sand.backends.lima.sleep``); None: none, ``{}``
    (woken since), or not one."""
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        mark = SleepMark(str(doc["how"]), int(doc["since"]), str(doc["by"]))
    except (ValueError, TypeError, KeyError):
        return None
    ok = mark.how in SLEEP_WAYS and mark.by in ("idle", "person")
    return mark if ok and mark.since > 0 else None


def observed(
    ctx: Ctx,
    inst: LimaInstance,
    sidecar: Sidecar | None,
    agent_started: float | None = None,
    slept: SleepMark | None = None,
) -> ObservedVM:
    """One listed instance as the planner sees it (ownership, lock, findings)."""
    c: Classification = classify(inst.name, sidecar, inst.param, ctx.project, ctx.name)
    lock: str | None = None
    if not inst.readable:
        lock = "no lima.yaml (being cloned or deleted?)"
    elif c.incomplete:
        lock = "creating (no sand marker yet)"
    elif inst.status not in ("Running", "Stopped"):
        lock = f"lima status {inst.status or 'unknown'}"
    details = {
        "dir": inst.dir,
        "status": inst.status,
        "ssh_config": inst.ssh_config_file,
        "ssh_address": inst.ssh_address,
        "ssh_port": str(inst.ssh_local_port),
        "user": inst.user,
        "identity_file": inst.identity_file,
        "uid": c.uid,
        "lima_version": inst.lima_version,
    }
    if inst.errors:
        details["errors"] = "; ".join(inst.errors)
    if inst.power == "running" and (boot := boot_token(inst.host_agent_pid, agent_started)):
        details["boot"] = boot
    return ObservedVM(
        backend=ctx.name,
        name=inst.name,
        identity=inst.name,
        ownership=c.ownership,
        power=inst.power,
        cpus=inst.cpus,
        memory=inst.memory,
        disk=inst.disk,
        protect=inst.protected,
        # Protection sand did not record setting is an operator's: never lifted.
        operator_protected=inst.protected and not (sidecar is not None and sidecar.protect),
        lock=lock,
        ports=limayaml.observed_ports(inst.config),
        marker=c.marker,
        deep=True,
        findings=limayaml.security_findings(
            inst.config, ctx.bundle.location if ctx.bundle else None
        ),
        details=details,
        # A (re)start by limactl restarts the host agent; it writes ha.pid as it starts.
        booted_at=agent_started if inst.power == "running" else None,
        address=_address(ctx, inst),
        slept=slept if c.ownership is Ownership.MANAGED else None,
    )


def _address(ctx: Ctx, inst: LimaInstance) -> str | None:
    """The instance's SSH forward while it runs; on a remote Lima host, there."""
    if inst.power != "running" or not inst.ssh_local_port:
        return None
    where = f" on {ctx.runner.where}" if ctx.runner.remote else ""
    return f"{inst.ssh_address}:{inst.ssh_local_port}{where}"


async def inspect(ctx: Ctx, *names: str) -> dict[str, Inspected]:
    """A per-name read (one call): listing entries and sidecars, or absent."""
    argv = scripts.observe_argv(ctx.limactl, version=False, names=names)
    res = await ctx.runner.run(argv, env={"LC_ALL": "C"}, timeout=ctx.timeouts.list)
    if not res.ok:
        raise error(ctx, res, "the per-instance listing script")
    try:
        frames = parse_frames(res.stdout)
        if frames.list_rc != 0:
            raise error(
                ctx,
                Completed(res.argv, frames.list_rc or 1, b"", res.stderr),
                "limactl list --json " + " ".join(names),
            )
        instances = {i.name: i for i in parse_list(frames.list_stdout)}
    except ListingError as exc:
        raise BackendError(str(exc), backend=ctx.name) from None
    out: dict[str, Inspected] = {}
    for n in names:
        inst = instances.get(n)
        if inst is None:
            out[n] = Inspected(None)
            continue
        raw = frames.files.get((n, scripts.MARKER_FILE))
        stamp = frames.files.get((n, scripts.BASE_STAMP_FILE))
        out[n] = Inspected(
            inst,
            parse_sidecar(raw) if raw is not None else None,
            parse_base_stamp(stamp) if stamp is not None else None,
            frames.host_agent_started.get(n),
        )
    return out


async def observe_one(ctx: Ctx, name: str) -> ObservedVM:
    """``name`` as listed now; the creates (and changes) that ask together share one
    ``limactl list`` (``shared.py``)."""
    if ctx.reads is None:
        ctx.reads = SharedReads(lambda names: inspect(ctx, *names))
    found = await ctx.reads.get(name)
    if found.instance is None:
        raise BackendError(f"instance {name} vanished on {ctx.runner.where}", backend=ctx.name)
    return observed(ctx, found.instance, found.sidecar, found.agent_started)


def forget(ctx: Ctx, name: str) -> None:
    """``name`` is gone from the host: a create may take it again in this run."""
    if ctx.seen is not None:
        ctx.seen.discard(name)


def note(ctx: Ctx, name: str) -> None:
    """``name`` now exists on the host (as the listing would show it)."""
    if ctx.seen is not None:
        ctx.seen.add(name)


async def refuse_taken(ctx: Ctx, name: str) -> None:
    """A create takes only a free name. The planner decided it from this backend's
    observation; the name is read again only when there was none."""
    taken = name in ctx.seen if ctx.seen is not None else None
    if taken is None:
        taken = (await inspect(ctx, name))[name].instance is not None
    if taken:
        raise BackendError(
            f"an instance named {name} already exists on {ctx.runner.where}; sand does not "
            "touch it",
            backend=ctx.name,
        )


async def cleanup_half_made(ctx: Ctx, name: str, source_uid: str | None) -> bool:
    """After a failed clone/create: remove what it left. True when settled.
    ``source_uid``: a fork's source's incarnation, whose marker its copy carries."""
    try:
        found = (await inspect(ctx, name))[name]
        inst = found.instance
        if inst is None:
            return True
        side = found.sidecar
        # A fork's copy carries its source's marker (the name was free before the copy).
        copied = source_uid is not None and side is not None and side.uid == source_uid
        if side is not None and not copied:
            return True  # carries a marker: not half-made
        await vmops.remove(ctx, name, readable=inst.readable)
        return True
    except SandError:
        return False  # leave the journal entry open: recover() settles it next run
