"""Provision a guest over SSH: converge it to its DesiredVM, in place, paying for what changed.

A provision is a list of bundle steps (see ``steps.py``): user, the machine's steps
(packages, toolchain, agents), the VM's own (locale, home), secrets, repos. It runs
as one guest command, the driver (``driver.py``): the guest compares each step's
digest with its ledger and the host sends only what the changed steps need, so a
reprovision costs the steps whose inputs changed, and a no-op is one exchange.
Each step compares before it writes and reports what it changed
(``ProvisionReport.changed``). ``deliver_secrets`` runs only the secrets step:
rotating or removing a value never reinstalls anything, and a running guest picks
it up without a restart. ``provision_base`` builds a golden base: its machine steps,
then the generalization that makes each clone a machine of its own.

What is provisioning's own stays here: reading the ``sand:changed`` markers out of
the steps' output, and scrubbing this VM's secret values out of every tail shown.

Failures name their layer: TransportError when SSH itself failed (unreachable,
refused key, changed host key, connection lost), GuestCommandError when a
step ran and failed (its name, exit status and last output lines, with every
secret value redacted and every terminal control removed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sand import activity
from sand.audit.trail import secrets_delivered
from sand.broker.access import BrokerAccess
from sand.defaults import GUEST_SSH_PATIENCE
from sand.desired.spec import DesiredBase, DesiredVM
from sand.errors import GuestCommandError
from sand.guest.endpoint import GuestEndpoint
from sand.guest.runner import GuestTimeout, SshRunner
from sand.guest.ssh import CONNECT_DEADLINE, connect, repin, where
from sand.logs import get_logger, redact
from sand.provision.bundle import Bundle, default_bundle
from sand.provision.driver import (
    DRIVER,
    FRAME,
    NEED,
    TIMED_OUT,
    Outcome,
    Run,
    plan_run,
    read_frames,
)
from sand.provision.item import item_steps
from sand.provision.output import CHANGED, scrub, tail_of
from sand.provision.secretcheck import SECRETS_MISSING, check_secrets_step
from sand.provision.steps import MACHINE, Step, base_build_steps, provision_steps, secrets_step
from sand.secrets.resolve import SecretValue, values_for
from sand.terminal import inert

# A running guest slow to answer (just restarted, under load) is waited for as every other
# path waits for it (sand.defaults); one that does not answer by then is reported.
CHECK_DEADLINE = GUEST_SSH_PATIENCE


@dataclass(frozen=True)
class StepReport:
    name: str
    changes: tuple[str, ...]  # what the step changed (paths, names; never values)
    seconds: float  # as the guest timed it; 0 for a step skipped
    ran: bool = True  # False: its digest matched the guest's ledger


@dataclass(frozen=True)
class ProvisionReport:
    vm: str
    steps: tuple[StepReport, ...]
    seconds: float
    # Exchanges with the guest after connecting: 1 when nothing had to run, 2 otherwise.
    round_trips: int = 0

    @property
    def ran(self) -> list[str]:
        """The steps that ran (the bundle's install included), in order."""
        return [s.name for s in self.steps if s.ran]

    @property
    def changed(self) -> int:
        """How many steps changed something; 0 means the guest was already converged."""
        return sum(1 for s in self.steps if s.changes)

    @property
    def changes(self) -> list[str]:
        return [f"{s.name}: {c}" for s in self.steps for c in s.changes]


# Steps that download (apt, npm, an image's own step): held to a host's limit, if any.
HEAVY_STEPS = frozenset({"packages", "vm-packages", "toolchain", "agents"})
# The steps that may make the guest's SSH host keys anew (its pin follows them).
IDENTITY_STEPS = frozenset({"fork-identity", "pool-identity"})


async def provision(
    endpoint: GuestEndpoint,
    vm: DesiredVM,
    secret_values: Mapping[str, str | SecretValue],
    *,
    log: Any = None,
    bundle: Bundle | None = None,
    agent_source: str | None = None,
    connect_deadline: float = CONNECT_DEADLINE,
    heavy: asyncio.Semaphore | None = None,
    broker: BrokerAccess | None = None,
    egress_proxy: str | None = None,
) -> ProvisionReport:
    """Bring the guest to ``vm``'s guest spec; safe to repeat, runs only what changed.

    ``secret_values`` maps secret names to values (``resolve_secrets`` output);
    ``agent_source`` overrides SAND_AGENT_SOURCE (a host dir of stand-in agent
    executables to upload instead of installing from the registry); ``heavy``
    limits how many runs download at once (one backend host's apt mirror);
    ``egress_proxy``: the VM's proxy URL, credential included (Proxmox).
    """
    if not vm.provision:
        return _skipped(vm, log)
    values = values_for(vm, secret_values)
    # Built before connecting: a spec that cannot be provisioned fails before any SSH.
    steps = [
        *provision_steps(
            vm, values, agent_source=agent_source, broker=broker, egress_proxy=egress_proxy
        ),
        *item_steps(vm),
    ]
    return await _run(
        endpoint,
        vm.name,
        f"vm:{vm.name}",
        vm.user,
        steps,
        values,
        log,
        "provision",
        connect_deadline,
        bundle,
        heavy,
    )


async def provision_base(
    endpoint: GuestEndpoint,
    base: DesiredBase,
    *,
    log: Any = None,
    bundle: Bundle | None = None,
    agent_source: str | None = None,
    connect_deadline: float = CONNECT_DEADLINE,
    heavy: asyncio.Semaphore | None = None,
) -> ProvisionReport:
    """Build golden base ``base`` on the guest at ``endpoint``: its user and machine steps,
    each recorded in the guest's ledger (a clone then skips them), then generalize."""
    steps = base_build_steps(base, agent_source=agent_source)
    return await _run(
        endpoint,
        f"base {base.name}",
        f"base:{base.name}",
        base.user,
        steps,
        {},
        log,
        "base",
        connect_deadline,
        bundle,
        heavy,
    )


async def deliver_secrets(
    endpoint: GuestEndpoint,
    vm: DesiredVM,
    secret_values: Mapping[str, str | SecretValue],
    *,
    log: Any = None,
    bundle: Bundle | None = None,
    connect_deadline: float = CONNECT_DEADLINE,
    broker: BrokerAccess | None = None,
) -> ProvisionReport:
    """Put the VM's current secrets in place and remove any it no longer has.

    For a secret-only change (rotation) on a provisioned, running guest. After
    the guest reboots its tmpfs is empty, so call this after every start too.
    """
    if not vm.provision:
        return _skipped(vm, log)
    values = values_for(vm, secret_values)
    steps = [secrets_step(vm, values, broker)]
    return await _run(
        endpoint,
        vm.name,
        f"vm:{vm.name}",
        vm.user,
        steps,
        values,
        log,
        "deliver_secrets",
        connect_deadline,
        bundle,
        None,
    )


async def secrets_present(
    endpoint: GuestEndpoint, vm: DesiredVM, *, connect_deadline: float = CHECK_DEADLINE
) -> bool:
    """Whether the guest's tmpfs still holds every secret file sand delivered to ``vm``.

    False when it does not (a reboot emptied it); TransportError or
    GuestCommandError when the guest cannot say. Reads nothing but file names.
    """
    step = check_secrets_step(vm)
    async with connect(endpoint, deadline=connect_deadline) as conn:
        runner = SshRunner(conn, step.name, where=where(endpoint))
        result = await runner.run_command(
            step.command(endpoint.user, vm.user), merge_stderr=True, timeout=step.timeout
        )
    if result.exit_status == 0:
        return True
    if result.exit_status == SECRETS_MISSING:
        return False
    raise GuestCommandError(step.name, result.exit_status, tail_of(result.stdout, {}))


async def _run(
    endpoint: GuestEndpoint,
    vm: str,
    label: str,
    user: str,
    steps: Sequence[Step],
    values: Mapping[str, str],
    log: Any,
    what: str,
    connect_deadline: float,
    bundle: Bundle | None = None,
    heavy: asyncio.Semaphore | None = None,
) -> ProvisionReport:
    log = (log or get_logger("sand.provision")).bind(vm=vm, target=where(endpoint))
    start = time.monotonic()
    run = plan_run(label, user, bundle or default_bundle(), steps)
    exchanges = 1

    async with contextlib.AsyncExitStack() as held:

        async def reply(line: bytes) -> tuple[bytes, float] | None:
            nonlocal exchanges
            bundle_needed, needed = run.needed(line)
            if not bundle_needed and not needed:
                return None
            exchanges = 2
            if heavy is not None and HEAVY_STEPS.intersection(needed):
                await held.enter_async_context(_held(heavy))
            return run.payloads(bundle_needed, needed), run.timeout(bundle_needed, needed)

        async with connect(endpoint, deadline=connect_deadline) as conn:
            runner = SshRunner(conn, where=where(endpoint))
            command = _driver_command(endpoint.user)
            try:
                result = await runner.converse(
                    command,
                    run.header(),
                    reply,
                    marker=(NEED + run.nonce).encode(),
                    timeout=60.0,
                    step=what,
                    on_output=_Narrator(run),
                )
            except GuestTimeout as exc:
                outcomes = read_frames(exc.output.decode(errors="replace"), run.nonce)
                name = outcomes[-1].name if outcomes else what
                tail = tail_of(outcomes[-1].output.encode() if outcomes else exc.output, values)
                raise GuestCommandError(
                    name, None, f"{tail}\n(no result after {exc.timeout:g}s)".lstrip()
                ) from None
            if _new_host_keys(result.stdout, run.nonce):
                await repin(conn, endpoint)
    text = inert(result.stdout.decode(errors="replace"))
    outcomes = read_frames(text, run.nonce)
    reports = [_report(o, values) for o in outcomes]
    failed = next((o for o in outcomes if o.ran and o.status != 0), None)
    if failed is not None or result.exit_status != 0:
        raise _failure(failed, result.exit_status, result.exit_signal, text, values, run)
    for report in reports:
        log.info(
            f"{what}.step",
            step=report.name,
            ran=report.ran,
            changed=len(report.changes),
            seconds=round(report.seconds, 3),
        )
        for change in report.changes:
            log.debug(f"{what}.change", step=report.name, change=change)
    done = ProvisionReport(vm, tuple(reports), time.monotonic() - start, exchanges)
    if any(r.name == "secrets" and r.ran for r in reports):  # secrets_step's name
        secrets_delivered(vm, where(endpoint), values)
    log.info(
        f"{what}.done",
        changed_steps=done.changed,
        ran=len(done.ran),
        round_trips=exchanges,
        seconds=round(done.seconds, 3),
    )
    return done


def _new_host_keys(stdout: bytes, nonce: str) -> bool:
    """Whether a step of this run made the guest's SSH host keys anew (a fork's
    fork-identity step, a pool VM's pool-identity where its keys were not its own): its
    connection is still the guest's, the pin is not."""
    return any(
        outcome.name in IDENTITY_STEPS
        and outcome.ran
        and outcome.status == 0
        and any(
            line.startswith(CHANGED) and "SSH host keys" in line
            for line in outcome.output.splitlines()
        )
        for outcome in read_frames(stdout.decode(errors="replace"), nonce)
    )


class _Narrator:
    """Says each step as the guest begins it (``sand.activity``: the run's progress), from
    the driver's frames as they arrive."""

    def __init__(self, run: Run) -> None:
        self.prefix = f"{FRAME}{run.nonce} run ".encode()
        self.limits = {p.step.name: p.step.timeout for p in run.steps}
        self.pending = b""

    def __call__(self, data: bytes) -> None:
        *lines, pending = (self.pending + data).split(b"\n")
        self.pending = pending[-4096:]  # a frame is short; output without newlines is not
        for line in lines:
            if line.startswith(self.prefix):
                name = line[len(self.prefix) :].decode(errors="replace").strip()
                activity.step(f"provisioning: {name}", limit=self.limits.get(name))


@contextlib.asynccontextmanager
async def _held(gate: asyncio.Semaphore) -> AsyncIterator[None]:
    async with gate:
        yield


def _driver_command(login_user: str) -> str:
    """The driver runs as root: through sudo unless the login is root itself."""
    runs = Step("driver", ("/bin/bash", "-c", DRIVER, "sand-run"), True)
    return runs.command(login_user, "root")


def _report(outcome: Outcome, values: Mapping[str, str]) -> StepReport:
    changes = tuple(
        redact(scrub(line[len(CHANGED) :], values))
        for line in outcome.output.splitlines()
        if line.startswith(CHANGED)
    )
    return StepReport(outcome.name, changes, outcome.seconds, outcome.ran)


def _failure(
    failed: Outcome | None,
    status: int,
    signal: str,
    text: str,
    values: Mapping[str, str],
    run: Run,
) -> GuestCommandError:
    """The error for a run that did not end well, named for the step that failed."""
    if failed is None:
        # The driver itself refused (a header it could not read) or was cut off.
        tail = tail_of(text.encode(), values)
        if signal:
            tail += f"\n(killed by signal {signal})"
        return GuestCommandError("driver", None if status == -1 else status, tail)
    tail = tail_of(failed.output.encode(), values)
    if failed.status == TIMED_OUT:
        limit = next((p.step.timeout for p in run.steps if p.step.name == failed.name), 0.0)
        return GuestCommandError(failed.name, None, f"{tail}\n(no result after {limit:g}s)")
    return GuestCommandError(failed.name, failed.status, tail)


def machine_steps_of(report: ProvisionReport, steps: Sequence[Step]) -> list[str]:
    """The machine-scoped steps among those that ran (what a golden base spares a VM)."""
    machine = {s.name for s in steps if s.scope == MACHINE}
    return [name for name in report.ran if name in machine]


def _skipped(vm: DesiredVM, log: Any) -> ProvisionReport:
    (log or get_logger("sand.provision")).info("provision.skipped", vm=vm.name, reason="off")
    return ProvisionReport(vm.name, (), 0.0)
