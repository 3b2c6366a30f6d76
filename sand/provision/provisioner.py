"""Provision a guest over SSH: converge it to its DesiredVM, in place.

A provision is a fixed sequence of bundle steps (see ``steps.py``): install
the bundle, then user, packages, agents, home, secrets, repos. Each step
compares before it writes and reports what it changed, so running it again on
an unchanged spec changes nothing and says so (``ProvisionReport.changed``).
``deliver_secrets`` runs only the secrets step: rotating or removing a value
never reinstalls anything, and a running guest picks it up without a restart.

Each step is one command of the guest transport's runner
(:class:`sand.guest.runner.SshRunner`), its stderr merged into its stdout; what
is provisioning's own stays here: reading the ``sand:changed`` markers out of
that output, and scrubbing this VM's secret values out of every tail shown.

Failures name their layer: TransportError when SSH itself failed (unreachable,
refused key, changed host key, connection lost), GuestCommandError when a
step ran and failed (its name, exit status and last output lines, with every
secret value redacted and every terminal control removed).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sand import activity
from sand.desired.spec import DesiredVM
from sand.errors import GuestCommandError
from sand.guest.endpoint import GuestEndpoint
from sand.guest.runner import GuestTimeout, SshRunner
from sand.guest.ssh import CONNECT_DEADLINE, connect, where
from sand.logs import get_logger, redact
from sand.provision.bundle import Bundle, default_bundle
from sand.provision.steps import (
    SECRETS_MISSING,
    Step,
    base_steps,
    bundle_step,
    check_secrets_step,
    repos_step,
    secrets_step,
)
from sand.secrets.resolve import SecretValue, values_for
from sand.terminal import inert

CHANGED = "sand:changed "
TAIL_LINES = 20
# A running guest answers at once; one that does not within this is reported, not waited for.
CHECK_DEADLINE = 5.0


@dataclass(frozen=True)
class StepReport:
    name: str
    changes: tuple[str, ...]  # what the step changed (paths, names; never values)
    seconds: float


@dataclass(frozen=True)
class ProvisionReport:
    vm: str
    steps: tuple[StepReport, ...]
    seconds: float

    @property
    def changed(self) -> int:
        """How many steps changed something; 0 means the guest was already converged."""
        return sum(1 for s in self.steps if s.changes)

    @property
    def changes(self) -> list[str]:
        return [f"{s.name}: {c}" for s in self.steps for c in s.changes]


async def provision(
    endpoint: GuestEndpoint,
    vm: DesiredVM,
    secret_values: Mapping[str, str | SecretValue],
    *,
    log: Any = None,
    bundle: Bundle | None = None,
    agent_source: str | None = None,
    connect_deadline: float = CONNECT_DEADLINE,
) -> ProvisionReport:
    """Bring the guest to ``vm``'s guest spec; safe to repeat, changes only differences.

    ``secret_values`` maps secret names to values (``resolve_secrets`` output);
    ``agent_source`` overrides SAND_AGENT_SOURCE (a host dir of stand-in agent
    executables to upload instead of installing from the registry).
    """
    if not vm.provision:
        return _skipped(vm, log)
    values = values_for(vm, secret_values)
    b = bundle or default_bundle()
    # Built before connecting: a spec that cannot be provisioned fails before any SSH.
    steps = [
        bundle_step(b),
        *base_steps(vm, agent_source=agent_source),
        secrets_step(vm, values),
        repos_step(vm),
    ]
    return await _run(endpoint, vm, steps, values, log, "provision", connect_deadline)


async def deliver_secrets(
    endpoint: GuestEndpoint,
    vm: DesiredVM,
    secret_values: Mapping[str, str | SecretValue],
    *,
    log: Any = None,
    bundle: Bundle | None = None,
    connect_deadline: float = CONNECT_DEADLINE,
) -> ProvisionReport:
    """Put the VM's current secrets in place and remove any it no longer has.

    For a secret-only change (rotation) on a provisioned, running guest. After
    the guest reboots its tmpfs is empty, so call this after every start too.
    """
    if not vm.provision:
        return _skipped(vm, log)
    values = values_for(vm, secret_values)
    steps = [bundle_step(bundle or default_bundle()), secrets_step(vm, values)]
    return await _run(endpoint, vm, steps, values, log, "deliver_secrets", connect_deadline)


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
    raise GuestCommandError(step.name, result.exit_status, _tail(result.stdout, {}))


async def _run(
    endpoint: GuestEndpoint,
    vm: DesiredVM,
    steps: list[Step],
    values: Mapping[str, str],
    log: Any,
    what: str,
    connect_deadline: float,
) -> ProvisionReport:
    log = (log or get_logger("sand.provision")).bind(vm=vm.name, target=where(endpoint))
    start = time.monotonic()
    reports: list[StepReport] = []

    async with connect(endpoint, deadline=connect_deadline) as conn:
        runner = SshRunner(conn, where=where(endpoint))
        for step in steps:
            report = await _run_step(runner, endpoint, vm, step, values)
            reports.append(report)
            log.info(
                f"{what}.step",
                step=step.name,
                changed=len(report.changes),
                seconds=round(report.seconds, 3),
            )
            for change in report.changes:
                log.debug(f"{what}.change", step=step.name, change=change)
    result = ProvisionReport(vm.name, tuple(reports), time.monotonic() - start)
    log.info(f"{what}.done", changed_steps=result.changed, seconds=round(result.seconds, 3))
    return result


def _skipped(vm: DesiredVM, log: Any) -> ProvisionReport:
    (log or get_logger("sand.provision")).info("provision.skipped", vm=vm.name, reason="off")
    return ProvisionReport(vm.name, (), 0.0)


async def _run_step(
    runner: SshRunner,
    endpoint: GuestEndpoint,
    vm: DesiredVM,
    step: Step,
    values: Mapping[str, str],
) -> StepReport:
    start = time.monotonic()
    activity.step(f"provisioning: {step.name}", limit=step.timeout)
    try:
        # Read whole (no limit): the output is the bundle's own scripts (apt, npm),
        # and the change markers may come anywhere in it.
        result = await runner.run_command(
            step.command(endpoint.user, vm.user),
            stdin=step.stdin,
            timeout=step.timeout,
            merge_stderr=True,
            limit=None,
            step=step.name,
        )
    except GuestTimeout as exc:
        tail = _tail(exc.output, values)
        raise GuestCommandError(
            step.name, None, f"{tail}\n(no result after {step.timeout:g}s)".lstrip()
        ) from None
    output = result.stdout
    if result.exit_status != 0:
        status = None if result.exit_status == -1 else result.exit_status
        tail = _tail(output, values)
        if result.exit_signal:
            tail += f"\n(killed by signal {result.exit_signal})"
        raise GuestCommandError(step.name, status, tail)
    text = inert(output.decode(errors="replace"))
    changes = tuple(
        redact(_scrub(line[len(CHANGED) :], values))
        for line in text.splitlines()
        if line.startswith(CHANGED)
    )
    return StepReport(step.name, changes, time.monotonic() - start)


def _tail(output: bytes, values: Mapping[str, str]) -> str:
    text = output.decode(errors="replace")
    # Inert before the tail is cut (a lone \r is a line of its own) and before
    # redaction: a value split by escape sequences is whole again only then.
    text = inert(_scrub(text, values))
    lines = [ln for ln in text.splitlines() if not ln.startswith(CHANGED)]
    return redact(_scrub("\n".join(lines[-TAIL_LINES:]), values))


def _scrub(text: str, values: Mapping[str, str]) -> str:
    # sand.logs.redact knows every registered value; these are this VM's own,
    # including ones a caller passed as plain strings.
    for value in sorted(values.values(), key=len, reverse=True):
        if value:
            text = text.replace(value, "[redacted]")
    return text
