"""The Lima backend: instances on this machine or on a remote host, via ``limactl``.

Observation is one call per reconcile: a fixed script that runs ``limactl list --json``
once and prints sand's sidecar files next to it (one SSH exec when remote). Everything
the planner compares comes from that listing (``cpus``, ``memory``, ``disk``, status,
``protected``, the resolved ``config``) plus the marker, so there are no per-VM reads.

Creating: a VM whose base (image + user) other VMs share is ``limactl clone``-d from a
base instance ``sand-base-<project>-<hash>`` (built once with ``limactl create``, never
started, rebuilt when its content stamp changes, under a lock); other VMs are created
directly. Both paths pass the security settings as ``--set`` so they hold after Lima
merges base templates. Every mutating limactl call is journalled first.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sand.backends.capabilities import Mutability
from sand.backends.lima import config as cfg
from sand.backends.lima import recover as recover_mod
from sand.backends.lima import scripts
from sand.backends.lima.listing import (
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
    new_uid,
    parse_base_stamp,
    parse_sidecar,
)
from sand.backends.lima.runner import Completed, Runner
from sand.backends.lima.sshconfig import parse_ssh_config
from sand.backends.protocol import PreflightItem, PreflightReport, RecoveryDecision
from sand.desired import DesiredVM, digest
from sand.errors import BackendError, SandError
from sand.guest.endpoint import GuestEndpoint, JumpHost
from sand.manifest.names import RESERVED_LIMA_PREFIX, check_vm_name
from sand.observed import Marker, Observation, ObservedVM, Ownership, RecordedVM, SecretsRecord
from sand.state.journal import Journal, JournalEntry
from sand.state.private import write_private_file
from sand.terminal import quoted

if TYPE_CHECKING:
    from sand.backends.lima.doctor import DoctorReport

FIELD_POLICY: Mapping[str, Mutability] = {
    "image": Mutability.REPLACE,
    "cpus": Mutability.RESTART,
    "memory": Mutability.RESTART,
    "disk": Mutability.GROW_ONLY,
    "ports": Mutability.RESTART,
    "state": Mutability.IN_PLACE,
    "protect": Mutability.IN_PLACE,
}
CONFIG_FIELDS = frozenset({"cpus", "memory", "disk", "ports"})
MIN_VERSION = (2, 2, 0)
BASE_FORMAT = 1  # bump to rebuild every base when the generated base config changes

TIMEOUT_LIST = 120.0
TIMEOUT_CREATE = 1800.0  # may download an image
TIMEOUT_CLONE = 1800.0  # copies a disk
TIMEOUT_START = 1200.0  # Lima itself waits up to 10 min for the guest
TIMEOUT_STOP = 300.0
TIMEOUT_SHORT = 120.0


@dataclass
class _Inspected:
    """One instance as read by a (per-name) observe call."""

    instance: LimaInstance | None
    sidecar: Sidecar | None = None
    base_stamp: BaseStamp | None = None
    agent_started: float | None = None


@dataclass
class _BaseState:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    ready: bool = False


class LimaBackend:
    type = "lima"
    field_policy: Mapping[str, Mutability] = FIELD_POLICY

    def __init__(
        self,
        name: str,
        *,
        project: str,
        runner: Runner,
        limactl: str = "limactl",
        clone_parallelism: int = 2,
        jump: JumpHost | None = None,
        key_dir: Path | None = None,
        bundle: cfg.BundleMount | None = None,
    ) -> None:
        self.name = name
        self.project = project
        self.runner = runner
        self.limactl = limactl
        self.clone_parallelism = clone_parallelism
        # Clones copy the base's disk; more than a few at once only contend for I/O.
        self._clone_slots = asyncio.Semaphore(clone_parallelism)
        self.jump = jump
        self._key_dir = key_dir
        self._bundle = bundle
        self._version_checked = False
        self._version_warnings: list[str] = []
        self._seen: set[str] | None = None  # every instance name in the last listing
        self._bases: dict[str, _BaseState] = {}
        self._base_users: dict[str, int] = {}
        self._base_stamps: dict[str, BaseStamp] = {}
        self._local_keys: dict[str, str] = {}
        # Seconds recovery waits for limactl children a killed run left running.
        self.recovery_wait = 600.0

    # --- limactl ----------------------------------------------------------------------

    def _argv(self, *args: str) -> list[str]:
        return [self.limactl, "--tty=false", *args]

    def _error(self, res: Completed, what: str, hint: str = "") -> BackendError:
        tail = res.err_tail()
        msg = f"`{what}` failed on {self.runner.where} (exit {res.returncode})"
        if "\n" in tail:  # quoted: no line of limactl's may pass for one of sand's
            msg += f":\n{quoted(tail)}"
        elif tail:
            msg += f": {tail}"
        if hint:
            msg += f"\n{hint}"
        return BackendError(msg, backend=self.name)

    async def _limactl(
        self, *args: str, stdin: bytes | None = None, timeout: float = TIMEOUT_SHORT
    ) -> Completed:
        res = await self.runner.run(self._argv(*args), stdin=stdin, timeout=timeout)
        if not res.ok:
            shown = " ".join(a for a in args if not a.startswith("--set=") and len(a) < 80)
            raise self._error(res, f"limactl {shown}")
        return res

    async def _script(
        self, argv: Sequence[str], *, stdin: bytes | None = None, what: str
    ) -> Completed:
        res = await self.runner.run(argv, stdin=stdin, timeout=TIMEOUT_SHORT)
        if not res.ok:
            raise self._error(res, what)
        return res

    # --- observe ----------------------------------------------------------------------

    async def observe(self, desired: Sequence[DesiredVM]) -> Observation:
        self._base_users = {}
        for vm in desired:
            key = self.base_name(vm)
            self._base_users[key] = self._base_users.get(key, 0) + 1
        self._seen = None
        want_version = not self._version_checked
        argv = scripts.observe_argv(self.limactl, version=want_version)
        res = await self.runner.run(argv, env={"LC_ALL": "C"}, timeout=TIMEOUT_LIST)
        if not res.ok:
            return self._unknown(
                f"the listing script failed (exit {res.returncode}): {res.err_tail()}"
            )
        try:
            frames = parse_frames(res.stdout)
        except ListingError as exc:
            return self._unknown(str(exc))
        if want_version:
            self._version_checked = True
            if frames.version is not None:
                self._version_warnings = self._version_warning(frames.version)
        warnings = list(self._version_warnings)
        if frames.list_rc != 0:
            tail = res.err_tail()
            hint = ""
            if "lima.yaml" in tail:
                hint = (
                    " (an instance directory without lima.yaml: one is being cloned or deleted;"
                    " Lima before 2.2.0 then fails the whole listing, lima-vm/lima#5236)"
                )
            return self._unknown(
                f"`limactl list --json` failed on {self.runner.where} (exit {frames.list_rc})"
                f"{hint}: {tail}",
                warnings,
            )
        try:
            instances = parse_list(frames.list_stdout)
        except ListingError as exc:
            return self._unknown(f"{exc} (on {self.runner.where})", warnings)
        self._seen = {inst.name for inst in instances}
        vms: list[ObservedVM] = []
        unreadable: list[str] = []
        self._base_stamps = {}
        for inst in instances:
            if not inst.readable:
                unreadable.append(inst.name)
            if inst.name.startswith(RESERVED_LIMA_PREFIX):
                stamp_raw = frames.files.get((inst.name, scripts.BASE_STAMP_FILE))
                stamp = parse_base_stamp(stamp_raw) if stamp_raw is not None else None
                if stamp is not None:
                    self._base_stamps[inst.name] = stamp
                continue  # bases are sand's plumbing, never VMs
            raw = frames.files.get((inst.name, scripts.MARKER_FILE))
            sidecar = parse_sidecar(raw) if raw is not None else None
            vms.append(self._observed(inst, sidecar, frames.host_agent_started.get(inst.name)))
        reason = None
        if unreadable:
            names = ", ".join(sorted(unreadable))
            reason = (
                f"instance {names} on {self.runner.where} has no readable lima.yaml (being "
                "cloned or deleted?); every instance there is unknown this run "
                "(lima-vm/lima#5236)"
            )
        return Observation(
            backend=self.name,
            vms=tuple(vms),
            unknown_reason=reason,
            unknown_because=tuple(sorted(unreadable)),
            requests=1,
            warnings=tuple(warnings),
            reboots_visible=False,  # a reboot inside the guest keeps the host agent
        )

    def _unknown(self, reason: str, warnings: Sequence[str] = ()) -> Observation:
        return Observation(
            backend=self.name,
            vms=(),
            unknown_reason=reason,
            requests=1,
            warnings=tuple(warnings),
        )

    def _version_warning(self, text: str) -> list[str]:
        v = version_tuple(text)
        if v and v < MIN_VERSION:
            return [
                f"limactl {'.'.join(map(str, v))} on {self.runner.where} is older than 2.2.0: "
                "its listing fails while any instance is being cloned or deleted "
                "(lima-vm/lima#5236), and sand then leaves that host alone for the run"
            ]
        return []

    def _observed(
        self, inst: LimaInstance, sidecar: Sidecar | None, agent_started: float | None = None
    ) -> ObservedVM:
        c: Classification = classify(inst.name, sidecar, inst.param, self.project, self.name)
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
        return ObservedVM(
            backend=self.name,
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
            ports=cfg.observed_ports(inst.config),
            marker=c.marker,
            deep=True,
            findings=cfg.security_findings(
                inst.config, self._bundle.location if self._bundle else None
            ),
            details=details,
            # A (re)start by limactl restarts the host agent; it writes ha.pid as it starts.
            booted_at=agent_started if inst.power == "running" else None,
        )

    async def _inspect(self, *names: str) -> dict[str, _Inspected]:
        """A per-name read (one call): listing entries and sidecars, or absent."""
        argv = scripts.observe_argv(self.limactl, version=False, names=names)
        res = await self.runner.run(argv, env={"LC_ALL": "C"}, timeout=TIMEOUT_LIST)
        if not res.ok:
            raise self._error(res, "the per-instance listing script")
        try:
            frames = parse_frames(res.stdout)
            if frames.list_rc != 0:
                raise self._error(
                    Completed(res.argv, frames.list_rc or 1, b"", res.stderr),
                    "limactl list --json " + " ".join(names),
                )
            instances = {i.name: i for i in parse_list(frames.list_stdout)}
        except ListingError as exc:
            raise BackendError(str(exc), backend=self.name) from None
        out: dict[str, _Inspected] = {}
        for n in names:
            inst = instances.get(n)
            if inst is None:
                out[n] = _Inspected(None)
                continue
            raw = frames.files.get((n, scripts.MARKER_FILE))
            stamp = frames.files.get((n, scripts.BASE_STAMP_FILE))
            out[n] = _Inspected(
                inst,
                parse_sidecar(raw) if raw is not None else None,
                parse_base_stamp(stamp) if stamp is not None else None,
                frames.host_agent_started.get(n),
            )
        return out

    async def _observe_one(self, name: str) -> ObservedVM:
        found = (await self._inspect(name))[name]
        if found.instance is None:
            raise BackendError(
                f"instance {name} vanished on {self.runner.where}", backend=self.name
            )
        return self._observed(found.instance, found.sidecar, found.agent_started)

    # --- bases ------------------------------------------------------------------------

    def base_name(self, vm: DesiredVM) -> str:
        key = digest({"image": vm.image, "user": vm.user}, 8)
        return f"{RESERVED_LIMA_PREFIX}-{self.project}-{key}"

    def _base_doc(self, vm: DesiredVM, name: str) -> dict[str, Any]:
        return cfg.base_config(image=vm.image, user=vm.user, project=self.project, name=name)

    def base_stamp(self, vm: DesiredVM) -> str:
        name = self.base_name(vm)
        security = cfg.security_settings((), None)
        return digest({"format": BASE_FORMAT, "doc": self._base_doc(vm, name), "set": security})

    def _should_clone(self, vm: DesiredVM) -> bool:
        if vm.disk < cfg.BASE_DISK:
            return False  # a clone can only grow its disk
        name = self.base_name(vm)
        stamp = self._base_stamps.get(name)
        if stamp is not None and stamp.stamp == self.base_stamp(vm):
            return True  # a fresh base exists: cloning is the fast path
        return self._base_users.get(name, 0) >= 2

    async def _ensure_base(self, vm: DesiredVM, journal: Journal) -> str:
        """Build the base for ``vm`` once per run (or rebuild a stale one), under a lock.

        Creates that share the base wait on the lock; once the base is ready in this run
        it is never rebuilt again, so no clone can race a rebuild.
        """
        name = self.base_name(vm)
        state = self._bases.setdefault(name, _BaseState())
        async with state.lock:
            if state.ready:
                return name
            want = self.base_stamp(vm)
            found = (await self._inspect(name))[name]
            inst = found.instance
            if inst is not None:
                origin = inst.param.get(cfg.PARAM_PROJECT)
                if inst.readable and origin != self.project:
                    raise BackendError(
                        f"instance {name} on {self.runner.where} uses sand's reserved base name "
                        "but was not made by this project; rename or delete it",
                        backend=self.name,
                    )
                fresh = (
                    inst.readable
                    and found.base_stamp is not None
                    and found.base_stamp.stamp == want
                    and found.base_stamp.project == self.project
                )
                if fresh:
                    if inst.power == "running":  # someone started it; clones need it stopped
                        with _journalled(
                            journal, "base-stop", backend=self.name, vm=name, identity=name
                        ):
                            await self._limactl("stop", name, timeout=TIMEOUT_STOP)
                    state.ready = True
                    return name
                await self._rebuild_cleanup(name, inst, journal)
            await self._build_base(vm, name, want, journal)
            state.ready = True
            return name

    async def _rebuild_cleanup(self, name: str, inst: LimaInstance, journal: Journal) -> None:
        with _journalled(
            journal, "base-delete", backend=self.name, vm=name, identity=name
        ) as entry:
            if inst.readable:
                await self._limactl("delete", "--force", name, timeout=TIMEOUT_STOP)
            else:
                await self._script(scripts.remove_half_made_argv(name), what=f"remove {name}")
            journal.step(entry, "deleted")

    async def _create_instance(self, name: str, body: str, sets: Sequence[str]) -> None:
        """limactl create from a generated lima.yaml on stdin, with the --set overrides
        Lima applies after merging templates (that is how the security keys win)."""
        await self._limactl(
            "create",
            f"--name={name}",
            *_set_flags(sets),
            "-",
            stdin=body.encode(),
            timeout=TIMEOUT_CREATE,
        )

    async def _build_base(self, vm: DesiredVM, name: str, stamp: str, journal: Journal) -> None:
        doc = self._base_doc(vm, name)
        body = cfg.to_yaml(doc, header=f"sand base for project {self.project}; do not edit")
        sets = cfg.set_expressions(cfg.security_settings((), None))
        base = BaseStamp(self.project, name, stamp, vm.image, vm.user)
        with _journalled(
            journal, "base", backend=self.name, vm=name, identity=name, image=vm.image, stamp=stamp
        ) as entry:
            await self._create_instance(name, body, sets)
            journal.step(entry, "created")
            await self._write_sidecar(name, scripts.BASE_STAMP_FILE, base.to_bytes())
            journal.step(entry, "stamped")
        self._base_stamps[name] = base

    # --- create -----------------------------------------------------------------------

    def _check_name(self, name: str) -> None:
        problem = check_vm_name(name, "lima")
        if problem:
            raise BackendError(problem, backend=self.name)

    async def create(self, vm: DesiredVM, journal: Journal) -> ObservedVM:
        self._check_name(vm.name)
        name = vm.name
        # The planner decided this create from this backend's observation; re-read only
        # when there was none (a failed create's cleanup relies on the name being free).
        taken = name in self._seen if self._seen is not None else None
        if taken is None:
            taken = (await self._inspect(name))[name].instance is not None
        if taken:
            raise BackendError(
                f"an instance named {name} already exists on {self.runner.where}; sand does not "
                "touch it",
                backend=self.name,
            )
        base = await self._ensure_base(vm, journal) if self._should_clone(vm) else None
        uid = new_uid()  # the incarnation, journalled first: recovery adopts only this one
        entry = journal.begin(
            "create",
            backend=self.name,
            vm=name,
            identity=name,
            via=f"clone:{base}" if base else "create",
            image=vm.image,
            uid=uid,
        )
        marked = False
        try:
            if base:
                settings = {
                    **cfg.vm_edit_settings(vm, self._bundle),
                    f"param.{cfg.PARAM_INSTANCE}": name,
                }
                async with self._clone_slots:
                    await self._limactl(
                        "clone",
                        base,
                        name,
                        *_set_flags(cfg.set_expressions(settings)),
                        timeout=TIMEOUT_CLONE,
                    )
            else:
                body = cfg.to_yaml(
                    cfg.vm_config(vm, self._bundle),
                    header=f"generated by sand for project {self.project}; edits show as drift",
                )
                sets = cfg.set_expressions(cfg.security_settings(vm.ports, self._bundle))
                await self._create_instance(name, body, sets)
            journal.step(entry, "created")
            sidecar = Sidecar(
                Marker(self.project, name, name, fingerprint="", image=vm.image),
                uid=uid,
                backend=self.name,
                protect=vm.protect,
            )
            await self._write_sidecar(name, scripts.MARKER_FILE, sidecar.to_bytes())
            marked = True
            journal.step(entry, "marked")
            if vm.protect:
                await self._limactl("protect", name)
                journal.step(entry, "protected")
            await self._start(name)
            journal.step(entry, "started")
            observed = await self._observe_one(name)
        except SandError:
            if marked:
                # A managed instance with fingerprint "": the next plan converges it.
                journal.finish(entry, "failed")
            elif await self._cleanup_half_made(name):
                journal.finish(entry, "failed")
            raise
        journal.finish(entry)
        if self._seen is not None:
            self._seen.add(name)
        return observed

    async def _cleanup_half_made(self, name: str) -> bool:
        """After a failed clone/create: remove what it left. True when settled."""
        try:
            found = (await self._inspect(name))[name]
            inst = found.instance
            if inst is None:
                return True
            if found.sidecar is not None:
                return True  # carries a marker: not half-made
            if inst.readable:
                await self._limactl("delete", "--force", name, timeout=TIMEOUT_STOP)
            else:
                await self._script(scripts.remove_half_made_argv(name), what=f"remove {name}")
            return True
        except SandError:
            return False  # leave the journal entry open: recover() settles it next run

    async def _start(self, name: str) -> None:
        res = await self.runner.run(self._argv("start", name), timeout=TIMEOUT_START)
        if res.ok:
            return
        log = ""
        tail = await self.runner.run(scripts.tail_argv(name, "ha.stderr.log"), timeout=30)
        if tail.ok and tail.stdout.strip():
            log = "last lines of ha.stderr.log:\n" + quoted(tail.stdout.decode(errors="replace"))
        raise self._error(res, f"limactl start {name}", log)

    async def _write_sidecar(self, name: str, filename: str, data: bytes) -> None:
        await self._script(
            scripts.write_sidecar_argv(name, filename),
            stdin=data,
            what=f"write {filename} for {name}",
        )

    # --- update -----------------------------------------------------------------------

    def _require_managed(self, current: ObservedVM, action: str) -> None:
        if current.ownership is not Ownership.MANAGED:
            raise BackendError(
                f"refusing to {action} {current.name}: it is {current.ownership.value}, not "
                "managed by this project",
                backend=self.name,
            )
        if current.name.startswith(RESERVED_LIMA_PREFIX):
            raise BackendError(
                f"refusing to {action} sand's base {current.name}", backend=self.name
            )

    async def update(
        self, vm: DesiredVM, current: ObservedVM, fields: Sequence[str], journal: Journal
    ) -> ObservedVM:
        self._require_managed(current, "update")
        wanted = set(fields)
        if "image" in wanted:
            raise BackendError(
                f"the image of {vm.name} cannot change in place (it forces replacement)",
                backend=self.name,
            )
        if "disk" in wanted and current.disk is not None and vm.disk < current.disk:
            raise BackendError(
                f"the disk of {vm.name} cannot shrink in place ({current.disk} -> {vm.disk} "
                "bytes; it forces replacement)",
                backend=self.name,
            )
        if "protect" in wanted and not vm.protect and current.operator_protected:
            raise BackendError(
                f"refusing to unprotect {vm.name}: its protection was set outside sand "
                "(`limactl unprotect` it to let sand manage it)",
                backend=self.name,
            )
        config_change = bool(wanted & CONFIG_FIELDS)
        name = current.identity
        power = current.power
        target = vm.state if "state" in wanted else power
        with _journalled(
            journal,
            "update",
            backend=self.name,
            vm=vm.name,
            identity=name,
            fields=sorted(wanted),
            uid=current.details.get("uid", ""),
        ) as entry:
            if config_change:
                if power == "running":
                    await self._limactl("stop", name, timeout=TIMEOUT_STOP)
                    journal.step(entry, "stopped")
                    power = "stopped"
                settings = cfg.vm_edit_settings(vm, self._bundle)
                await self._limactl("edit", name, *_set_flags(cfg.set_expressions(settings)))
                journal.step(entry, "edited")
            if "protect" in wanted and vm.protect != current.protect:
                if vm.protect:
                    # Recorded first: a protection sand set is never taken for an operator's.
                    await self._write_sidecar(
                        name, scripts.MARKER_FILE, self._sidecar(vm, current, protect=True)
                    )
                await self._limactl("protect" if vm.protect else "unprotect", name)
                journal.step(entry, "protected" if vm.protect else "unprotected")
            if target == "running" and power != "running":
                await self._start(name)
                journal.step(entry, "started")
            elif target == "stopped" and power == "running":
                await self._limactl("stop", name, timeout=TIMEOUT_STOP)
                journal.step(entry, "stopped")
        return await self._observe_one(name)

    # --- delete -----------------------------------------------------------------------

    async def delete(self, current: ObservedVM, journal: Journal) -> None:
        self._require_managed(current, "delete")
        if current.protect:
            raise BackendError(
                f"refusing to delete {current.name}: it is protected (limactl unprotect first)",
                backend=self.name,
            )
        name = current.identity
        found = (await self._inspect(name))[name]
        if found.instance is None:
            if self._seen is not None:
                self._seen.discard(name)
            return  # already gone
        fresh = self._observed(found.instance, found.sidecar)
        if fresh.ownership is not Ownership.MANAGED or (
            found.sidecar is not None and found.sidecar.uid != current.details.get("uid", "")
        ):
            raise BackendError(
                f"refusing to delete {name}: it changed since it was observed "
                f"(now {fresh.ownership.value})",
                backend=self.name,
            )
        if fresh.protect:
            raise BackendError(
                f"refusing to delete {name}: it is protected (limactl unprotect first)",
                backend=self.name,
            )
        with _journalled(
            journal,
            "delete",
            backend=self.name,
            vm=current.name,
            identity=name,
            uid=found.sidecar.uid if found.sidecar is not None else "",
        ) as entry:
            await self._limactl("delete", "--force", name, timeout=TIMEOUT_STOP)
            journal.step(entry, "deleted")
        if self._seen is not None:
            self._seen.discard(name)  # a replace creates it again right after

    # --- preflight and rename ------------------------------------------------------------

    async def preflight(self, items: Sequence[PreflightItem]) -> PreflightReport:
        from sand.backends.lima.preflight import preflight

        return await preflight(self, items)

    async def rename(self, current: ObservedVM, name: str, journal: Journal) -> ObservedVM:
        """``limactl rename`` a replacement to its final name (the instance must stop for it).

        Lima's rename moves the directory's files but not ``protected``, so protection
        is set again; the sidecar is rewritten with the new identity (until it is, the
        instance reads as a copy and nothing touches it; recovery finishes the rewrite).
        """
        self._require_managed(current, "rename")
        self._check_name(name)
        old = current.identity
        if (await self._inspect(name))[name].instance is not None:
            raise BackendError(
                f"cannot rename {old} to {name}: an instance named {name} exists",
                backend=self.name,
            )
        marker = current.marker or Marker(self.project, old, old, fingerprint="")
        # The same VM under its final name: incarnation, stamps and fingerprints kept.
        sidecar = Sidecar(
            dataclasses.replace(marker, name=name, identity=name, backend=self.name),
            uid=current.details.get("uid") or new_uid(),
            backend=self.name,
            protect=current.protect,
        )
        with _journalled(
            journal, "rename", backend=self.name, vm=name, identity=old, to=name
        ) as entry:
            running = current.power == "running"
            if running:
                await self._limactl("stop", old, timeout=TIMEOUT_STOP)
                journal.step(entry, "stopped")
            sets = cfg.set_expressions({f"param.{cfg.PARAM_INSTANCE}": name})
            await self._limactl("rename", old, name, *_set_flags(sets), timeout=TIMEOUT_CLONE)
            journal.step(entry, "renamed")
            await self._write_sidecar(name, scripts.MARKER_FILE, sidecar.to_bytes())
            journal.step(entry, "marked")
            if current.protect:
                await self._limactl("protect", name)
                journal.step(entry, "protected")
            if running:
                await self._start(name)
                journal.step(entry, "started")
        if self._seen is not None:
            self._seen.discard(old)
            self._seen.add(name)
        return await self._observe_one(name)

    # --- marker -----------------------------------------------------------------------

    async def mark_converged(
        self, vm: DesiredVM, current: ObservedVM, secrets: SecretsRecord | None = None
    ) -> None:
        self._require_managed(current, "mark")
        data = self._sidecar(vm, current, protect=vm.protect, converged=True, secrets=secrets)
        await self._write_sidecar(current.identity, scripts.MARKER_FILE, data)

    def _sidecar(
        self,
        vm: DesiredVM,
        current: ObservedVM,
        *,
        protect: bool,
        converged: bool = False,
        secrets: SecretsRecord | None = None,
    ) -> bytes:
        """The sidecar for ``current``: its incarnation kept, this backend's name written,
        and the secrets stamp ``secrets`` says was delivered (None: the one it has)."""
        fp = current.marker.fingerprint if current.marker else ""
        gfp = current.marker.guest_fingerprint if current.marker else ""
        if secrets is None:  # nothing delivered this run: keep what the VM records
            kept = current.marker
            secrets = SecretsRecord(kept.secrets, kept.secrets_at) if kept else None
        return Sidecar(
            Marker(
                project=self.project,
                name=vm.name,
                identity=current.identity,
                fingerprint=vm.fingerprint if converged else fp,
                guest_fingerprint=vm.guest_fingerprint if converged else gfp,
                image=vm.image,
                secrets=secrets.stamp if secrets else "",
                secrets_at=secrets.delivered_at if secrets and secrets.stamp else 0,
            ),
            uid=current.details.get("uid") or new_uid(),
            backend=self.name,
            protect=protect,
        ).to_bytes()

    # --- endpoint ---------------------------------------------------------------------

    async def endpoint(
        self, vm: DesiredVM | None, current: ObservedVM, *, wait: float | None = None
    ) -> GuestEndpoint:
        # Lima publishes the endpoint once the instance runs: nothing to wait for.
        d = current.details
        if current.power != "running":
            raise BackendError(
                f"{current.name} is {current.power}; it must be running to be reached",
                backend=self.name,
            )
        parsed = None
        if d.get("ssh_config"):
            res = await self.runner.run(scripts.read_file_argv(d["ssh_config"]), timeout=30)
            if res.ok:
                parsed = parse_ssh_config(
                    res.stdout.decode(errors="replace"), f"lima-{current.name}"
                )
        host = (parsed.hostname if parsed else None) or d.get("ssh_address") or "127.0.0.1"
        port = (parsed.port if parsed else None) or int(d.get("ssh_port") or 0)
        user = (parsed.user if parsed else None) or d.get("user") or (vm.user if vm else "")
        identity = (parsed.identity if parsed else None) or d.get("identity_file") or ""
        if not port or not identity:
            raise BackendError(
                f"Lima has not published an SSH endpoint for {current.name} yet "
                f"(port {port or '?'}, identity {identity or '?'})",
                backend=self.name,
            )
        if self.runner.remote:
            identity = await self._local_key(identity)
        uid = d.get("uid") or ""
        alias = f"lima-{current.name}" + (f".{uid}" if uid else "")
        return GuestEndpoint(
            host=host,
            port=port,
            user=user,
            identity=identity,
            host_key_policy="pin",
            host_key_alias=alias,
            jump=self.jump,
        )

    async def _local_key(self, remote_path: str) -> str:
        """A local copy (0600) of the remote Lima identity, for the jump-host hop."""
        if remote_path in self._local_keys:
            return self._local_keys[remote_path]
        res = await self.runner.run(scripts.read_file_argv(remote_path), timeout=30)
        if not res.ok:
            raise self._error(res, f"read the Lima identity {remote_path}")
        key_dir = self._key_dir
        if key_dir is None:
            from sand.state.paths import project_dir

            key_dir = project_dir(self.project) / "lima-keys"
        tag = hashlib.sha256(f"{self.runner.where}\0{remote_path}".encode()).hexdigest()[:12]
        path = key_dir / f"{self.name}-{tag}"
        write_private_file(path, res.stdout)  # in a 0700 dir, 0600 whatever the umask
        self._local_keys[remote_path] = str(path)
        return str(path)

    # --- recovery ---------------------------------------------------------------------

    async def decide_recovery(self, entry: Mapping[str, object], *, wait: bool) -> RecoveryDecision:
        return await recover_mod.decide(self, entry, wait=wait)

    async def act_recovery(self, entry: Mapping[str, object], decision: RecoveryDecision) -> str:
        return await recover_mod.act(self, entry, decision)

    async def recover(self, entry: Mapping[str, object]) -> str:
        """Decide (waiting for limactl children a killed run left) and act; the caller
        settles the journal entry."""
        return await self.act_recovery(entry, await self.decide_recovery(entry, wait=True))

    async def vanished(self, recorded: Sequence[RecordedVM]) -> dict[str, str | None]:
        return await recover_mod.vanished(self, [r.identity for r in recorded])

    async def _finish_rename(self, old: str, new: str) -> None:
        """Rewrite the sidecar of an instance renamed from ``old`` to ``new``."""
        side = (await self._inspect(new))[new].sidecar
        if side is None:
            return
        fixed = Sidecar(
            dataclasses.replace(side.marker, name=new, identity=new, backend=self.name),
            uid=side.uid,
            backend=self.name,
            protect=side.protect,
        )
        await self._write_sidecar(new, scripts.MARKER_FILE, fixed.to_bytes())

    async def doctor(self) -> DoctorReport:
        from sand.backends.lima.doctor import doctor

        return await doctor(self.name, self.runner, self.limactl)

    async def close(self) -> None:
        await self.runner.close()


@contextlib.contextmanager
def _journalled(journal: Journal, op: str, **fields: Any) -> Iterator[JournalEntry]:
    """Intent before the calls; "done" after, "failed" when a call reported an error.

    Anything else (a crash, a cancellation) leaves the entry open for ``recover``."""
    entry = journal.begin(op, **fields)
    try:
        yield entry
    except SandError:
        journal.finish(entry, "failed")
        raise
    journal.finish(entry)


def _set_flags(exprs: Sequence[str]) -> list[str]:
    out: list[str] = []
    for e in exprs:
        out.append(f"--set={e}")
    return out


def describe_policy() -> str:
    """The update-vs-replace table, for docs and ``sand explain``."""
    return json.dumps({k: v.value for k, v in FIELD_POLICY.items()}, indent=2)
