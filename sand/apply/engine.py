"""Carry out a plan: the only place (with the backends) that changes the world.

Each VM is applied independently under a bounded semaphore, so one failure
never stops the others; clones sharing one backend's storage get their own
smaller limit inside the backend. Every failure is kept with the layer that
raised it.

Golden bases the plan builds start first, all at once; a create or replace cloned
from one waits for its build (before taking a slot of the semaphore) and fails,
naming the base, when the build did. Bases the plan deletes go last, after every
VM change, each re-checked by its backend.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from sand import activity
from sand.apply.claims import ClaimsInRun
from sand.apply.events import Hooks, NoHooks, Phase, Steps
from sand.apply.forkguard import SourceLooks, announce_forks
from sand.apply.forksource import SourceSecrets, deliver_again
from sand.apply.replace import Guard, ReplaceKit, replace_vm, restore_kept
from sand.apply.sleeping import MemoryForkSources, how_to_sleep
from sand.backends.abilities import Sleeps
from sand.backends.protocol import Backend, BaseProvisioner
from sand.defaults import PARALLELISM
from sand.desired import DesiredVM
from sand.errors import ErrorLayer, SandError
from sand.logs import get_logger
from sand.observed import STOPPED, SUSPENDED, ObservedBase, ObservedVM, SecretsRecord
from sand.plan.model import Action, BaseAction, BaseChange, GuestAction, Plan, VMChange
from sand.plan.render import asleep_words
from sand.state.journal import Journal
from sand.survey.forksource import stops_source

# (vm, endpoint-producing backend, observed) → provisions the guest and says which
# secrets it delivered (None: none recorded); injected by the caller so the engine
# does not depend on how secrets are resolved.
Provisioner = Callable[[DesiredVM, Backend, ObservedVM, VMChange], Awaitable[SecretsRecord | None]]


@dataclass
class VMResult:
    vm: str
    backend: str
    action: str  # the change's word, as plan output has it (VMChange.verb)
    ok: bool = True
    layer: str = ""
    error: str = ""
    seconds: float = 0.0
    # The VM as the change left it (None for a delete or a failure): what the inventory
    # records. Not part of the JSON results.
    observed: ObservedVM | None = field(default=None, repr=False, compare=False)


@dataclass
class BaseResult:
    """What became of one golden base the plan built or deleted."""

    base: str
    backend: str
    action: str  # "build" | "delete"
    ok: bool = True
    layer: str = ""
    error: str = ""
    seconds: float = 0.0
    detail: str = ""  # what was done ("built as template 9001", "kept: ...")


@dataclass
class ApplyResult:
    results: list[VMResult] = field(default_factory=list)
    bases: list[BaseResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results) and all(b.ok for b in self.bases)

    def failures(self) -> list[VMResult]:
        return [r for r in self.results if not r.ok]

    def base_failures(self) -> list[BaseResult]:
        return [b for b in self.bases if not b.ok]


class BaseFailed(SandError):
    """A VM's golden base could not be built: the VM is not created."""

    layer = ErrorLayer.BASE


async def execute(
    plan: Plan,
    backends: Mapping[str, Backend],
    journal: Journal,
    provisioner: Provisioner,
    *,
    parallelism: int = PARALLELISM,
    hooks: Hooks | None = None,
    guard: Guard | None = None,
    archives: Path | None = None,
    base_provisioner: BaseProvisioner | None = None,
    released: Callable[[str, str], None] | None = None,
) -> ApplyResult:
    """Carry out ``plan``. ``guard`` is the last look for unpushed work before anything
    is destroyed (the CLI always passes one unless --allow-data-loss); ``archives`` is
    where ``preserve:`` paths are held while they move between guests;
    ``base_provisioner`` provisions the golden bases the plan builds; ``released`` is
    told each spare a claim renamed (:class:`ClaimsInRun`)."""
    gate = asyncio.Semaphore(max(1, parallelism))
    log = get_logger()
    kit = ReplaceKit(provisioner, guard, archives)
    say_to = hooks or NoHooks()
    base_results: list[BaseResult] = []
    builds: dict[tuple[str, str], asyncio.Task[ObservedBase]] = {}
    for change in plan.bases:
        if change.action is BaseAction.BUILD:
            key = (change.backend, change.fingerprint)
            builds[key] = asyncio.ensure_future(
                _build(
                    change,
                    backends[change.backend],
                    journal,
                    base_provisioner,
                    say_to,
                    base_results,
                )
            )

    claims = ClaimsInRun(plan, released)
    looks = SourceLooks(plan)
    memory_forks = MemoryForkSources(plan, kit)
    todo = plan.actionable()
    sources = SourceSecrets(plan, todo)

    async def run(change: VMChange) -> VMResult:
        result = VMResult(change.vm, change.backend, change.verb)
        started = time.monotonic()
        if not await claims.refillable(change):
            # The slot's spare was not claimed: it is still there, nothing to refill.
            result.ok, result.layer = False, ErrorLayer.BACKEND
            result.error = f"not refilled: the claim of spare {change.vm} did not happen"
            Steps(say_to, change.vm, change.backend)(Phase.FAILED, layer=result.layer)
            return result
        building = builds.get((change.backend, change.base or "")) if change.base else None
        if building is not None:
            # Waited for outside the semaphore: a create waiting for its base holds no slot.
            try:
                await asyncio.shield(building)
            except SandError as exc:
                say = Steps(say_to, change.vm, change.backend)
                result.ok, result.layer = False, BaseFailed.layer
                result.error = f"its golden base could not be built: {exc}"
                say(Phase.FAILED, layer=result.layer)
                result.seconds = time.monotonic() - started
                return result
        async with gate:
            # The clock of each VM's events starts when it gets its turn.
            say = Steps(hooks or NoHooks(), change.vm, change.backend)
            copied = False  # whether a fork reached the copy (which may stop its source)
            try:
                # What the backend and the guest say of their own steps (a bounded
                # wait, a retry) reaches this VM's events, and only this VM's.
                with activity.listening(say.heard):
                    if change.action is Action.CREATE and stops_source(change):
                        say(Phase.GUARDING, "is the source's agent working? (the copy stops it)")
                        await looks.refuse_while_working(change, backends[change.backend])
                    copied = True
                    backend = backends[change.backend]
                    try:
                        async with memory_forks.scrubbed(change, backend, say) as made:
                            result.observed = await _apply_one(
                                made, backend, journal, kit, say, claims
                            )
                    finally:
                        source = sources.fork_done(change, copied=True)
                    if source is not None:
                        await deliver_again(source, backend, kit.provisioner, say)
                say(Phase.DONE)
            except SandError as exc:
                result.ok, result.layer, result.error = False, exc.layer, str(exc)
                say(Phase.FAILED, layer=exc.layer)
                log.error("vm failed", vm=change.vm, layer=exc.layer, error=str(exc))
            except OSError as exc:
                result.ok, result.layer, result.error = False, "host", str(exc)
                say(Phase.FAILED, layer=ErrorLayer.HOST)
            finally:
                if not copied:  # refused before its copy (or cut short): counted all the same
                    sources.fork_done(change, copied=False)
        result.seconds = time.monotonic() - started
        return result

    announce_forks(todo, backends)
    results = await asyncio.gather(*(run(c) for c in todo))
    # Every build is awaited, also one no VM of this run used (an image's eager build).
    await asyncio.gather(*builds.values(), return_exceptions=True)
    for change in plan.bases:
        if change.action is BaseAction.DELETE:
            await _delete_base(change, backends[change.backend], journal, say_to, base_results)
    return ApplyResult(list(results), base_results)


async def _build(
    change: BaseChange,
    backend: Backend,
    journal: Journal,
    provision: BaseProvisioner | None,
    hooks: Hooks,
    results: list[BaseResult],
) -> ObservedBase:
    assert change.desired is not None and provision is not None
    say = Steps(hooks, f"base {change.name}", change.backend)
    result = BaseResult(change.name, change.backend, "build")
    started = time.monotonic()
    say(Phase.CREATING, f"building golden base {change.name}")
    try:
        built = await backend.build_base(change.desired, provision, journal)
    except SandError as exc:
        result.ok, result.layer, result.error = False, exc.layer, str(exc)
        say(Phase.FAILED, layer=exc.layer)
        get_logger().error("base failed", base=change.name, layer=exc.layer, error=str(exc))
        raise
    finally:
        result.seconds = time.monotonic() - started
        results.append(result)
    result.detail = f"built as {built.identity}"
    say(Phase.DONE)
    return built


async def _delete_base(
    change: BaseChange,
    backend: Backend,
    journal: Journal,
    hooks: Hooks,
    results: list[BaseResult],
) -> None:
    assert change.observed is not None
    say = Steps(hooks, f"base {change.name}", change.backend)
    result = BaseResult(change.name, change.backend, "delete")
    started = time.monotonic()
    say(Phase.DELETING, f"deleting golden base {change.name} ({change.identity})")
    try:
        result.detail = await backend.delete_base(change.observed, journal)
        say(Phase.DONE)
    except SandError as exc:
        result.ok, result.layer, result.error = False, exc.layer, str(exc)
        say(Phase.FAILED, layer=exc.layer)
    result.seconds = time.monotonic() - started
    results.append(result)


async def _apply_one(
    change: VMChange,
    backend: Backend,
    journal: Journal,
    kit: ReplaceKit,
    say: Steps,
    claims: ClaimsInRun,
) -> ObservedVM | None:
    vm, current = change.desired, change.observed
    if change.action is Action.DELETE:
        assert current is not None
        if kit.guard is not None:
            say(Phase.GUARDING, "last look for unpushed work")
            await kit.guard(backend, None, current, ())
        say(Phase.DELETING)
        await backend.delete(current, journal)
        return None
    assert vm is not None
    if change.sleep is not None:
        assert current is not None and isinstance(backend, Sleeps)
        how = await how_to_sleep(vm, backend, current, change.sleep.how, say)
        say(Phase.UPDATING, f"going to sleep ({how}): {change.sleep.why}")
        await backend.sleep(current, how, journal)
        # Nothing of the spec changed (the marker stays as it is); how it sleeps is what
        # was done, which the scrub may have made a stop where the plan said a hibernation.
        return replace(current, power=STOPPED, hibernated=how == SUSPENDED)
    if change.asleep is not None and current is not None and isinstance(backend, Sleeps):
        # An asleep VM was planned as the VM it is awake; wake it before anything acts.
        say(Phase.UPDATING, f"waking {vm.name}, {asleep_words(change.asleep)}")
        await backend.wake(vm, current, journal)
        current = replace(current, power="running", lock=None)
        if change.guest is GuestAction.NONE and vm.delivers_secrets:
            # A stop emptied its tmpfs; the scrub before a hibernation did too.
            change = replace(change, guest=GuestAction.SECRETS)
    provisioned = marked = False
    delivered: SecretsRecord | None = None
    if change.action is Action.REPLACE:
        # Provisioned inside: the replacement must work before the old VM goes.
        current, delivered = await replace_vm(change, backend, journal, kit, say)
        provisioned = True
    elif change.action is Action.CREATE and change.claim is not None:
        # No clone, no boot: the spare is renamed, then provisioned as this VM.
        current = await claims.claim(change, backend, journal, say)
        if vm.provision:
            say(Phase.PROVISIONING)
            delivered = await kit.provisioner(vm, backend, current, change)
            provisioned = True
    elif change.action is Action.CREATE:
        say(Phase.CREATING, "creating from its golden base" if change.base else "")
        # Each backend limits its own clone step (clone_parallelism): only the
        # clone contends for the storage lock, not the configure/start after it.
        # Nothing to provision or finish: the create writes the converged marker with
        # its own configuration (one write, not two).
        marked = not vm.provision and not _finishing(vm)
        current = await backend.create(
            vm, journal, from_base=change.base is not None, converged=marked
        )
        if vm.provision:
            say(Phase.PROVISIONING)
            delivered = await kit.provisioner(vm, backend, current, change)
            provisioned = True
            if await restore_kept(backend, vm, current, kit, say):
                delivered = await kit.provisioner(vm, backend, current, change)
    elif change.action is Action.UPDATE and change.fields:
        assert current is not None
        say(Phase.UPDATING, "updating " + ", ".join(f.field for f in change.fields))
        # Nothing reaches the guest after it: the update's config write carries the
        # converged marker (one write, not two, as a create's does).
        marked = not _guest_after_update(vm, change)
        current = await backend.update(
            vm, current, [f.field for f in change.fields], journal, converged=marked
        )
    assert current is not None
    if vm.provision and not provisioned:
        if change.guest is GuestAction.NONE and _rebooted(change) and vm.delivers_secrets:
            # Secrets live on the guest's tmpfs, which a restart empties: deliver again.
            change = replace(change, guest=GuestAction.SECRETS)
        if change.guest is GuestAction.PROVISION:
            say(Phase.PROVISIONING)
            delivered = await _reprovision_keeping(vm, backend, current, change, kit)
        elif change.guest is GuestAction.SECRETS:
            say(Phase.DELIVERING_SECRETS)
            delivered = await kit.provisioner(vm, backend, current, change)
    if change.action in (Action.CREATE, Action.REPLACE):
        # Creates always boot (provisioning needs a running guest) and are
        # unprotected until provisioned; settle power state and protection last.
        finishing = _finishing(vm)
        if finishing:
            say(Phase.FINISHING, "setting " + ", ".join(finishing))
            current = await backend.update(vm, current, finishing, journal)
    say(Phase.RECORDING)
    if not marked:
        await backend.mark_converged(vm, current, delivered)
    return current


def _guest_after_update(vm: DesiredVM, change: VMChange) -> bool:
    """Whether the guest is provisioned or sent secrets after ``change``'s update (the
    branch below the update in ``_apply_one``)."""
    if not vm.provision:
        return False
    return change.guest is not GuestAction.NONE or (_rebooted(change) and vm.delivers_secrets)


def _finishing(vm: DesiredVM) -> list[str]:
    """What a create or replace settles after it: power state, protection."""
    return [f for f, on in (("state", vm.state == "stopped"), ("protect", vm.protect)) if on]


async def _reprovision_keeping(
    vm: DesiredVM, backend: Backend, current: ObservedVM, change: VMChange, kit: ReplaceKit
) -> SecretsRecord | None:
    """Reprovision in place; ``preserve:`` paths are copied first and any file the run
    removed is put back (files sand itself manages may change: that is the point)."""
    if not vm.preserve or kit.archives is None:
        return await kit.provisioner(vm, backend, current, change)
    from sand.provision.preserve import archive_out, restore_in

    endpoint = await backend.endpoint(vm, current)
    path = kit.archives / f"{vm.name}.reprovision-{int(time.time())}.tar"
    archive = await archive_out(endpoint, vm.user, vm.preserve, path)
    try:
        delivered = await kit.provisioner(vm, backend, current, change)
        await restore_in(endpoint, vm.user, archive, missing_only=True)
    finally:
        archive.remove()
    return delivered


def _rebooted(change: VMChange) -> bool:
    """Whether applying ``change`` stops or restarts a guest that ends up running."""
    if change.action is not Action.UPDATE or change.desired is None:
        return False
    if change.desired.state != "running":
        return False
    return change.requires_restart or any(f.field == "state" for f in change.fields)
