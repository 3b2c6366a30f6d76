"""The bridge from the engine to provisioning: secret values and the provisioner.

Secret values are resolved on the host only for VMs that use them, once per
run, and live only in memory. What a delivery leaves behind is a *stamp* on
the VM itself (``sand.secrets.stamp``): any host holding the same values
computes the same one, so no host-side record is needed to notice a rotation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sand.backends.protocol import Backend, BaseProvisioner
from sand.broker.client import grant_vm
from sand.desired import DesiredVM
from sand.desired.spec import DesiredBase
from sand.egress.registry import access as egress_access
from sand.errors import SandError
from sand.observed import ObservedVM, SecretsRecord
from sand.plan.model import GuestAction, VMChange
from sand.state.provlog import record_provision_log
from sand.survey.guest_secrets import GuestSecrets

if TYPE_CHECKING:
    from sand.apply.engine import Provisioner
    from sand.guest.endpoint import GuestEndpoint
    from sand.project import Session
    from sand.provision.provisioner import ProvisionReport


def make_base_provisioner(session: Session) -> BaseProvisioner:
    """Provisions a golden base's build machine: its machine steps, then generalized."""

    async def provision_built(base: DesiredBase, endpoint: GuestEndpoint) -> None:
        # here, not at the top: sand apply starts without it
        from sand.provision import provision_base

        await provision_base(endpoint, base)

    return provision_built


def make_provisioner(session: Session, secrets: GuestSecrets) -> Provisioner:
    async def provision_vm(
        vm: DesiredVM, backend: Backend, current: ObservedVM, change: VMChange
    ) -> SecretsRecord:
        # here, not at the top: sand apply starts without it
        from sand.provision import deliver_secrets, provision

        only_secrets = change.guest is GuestAction.SECRETS
        what = "deliver secrets" if only_secrets else "provision"
        try:
            endpoint = await backend.endpoint(vm, current)
            values = secrets.for_vm(vm)
            # A new broker credential for each delivery: the one before it dies here.
            jump = endpoint.jump is not None
            broker = grant_vm(session.project, vm, endpoint.host, jump, values)
            # Before the steps that use it: a deny policy's firewall lets the guest
            # reach the broker where it listens for it now (or no more, without grants).
            await backend.open_to_broker(vm, current)
            # The proxy vouches for the VM from the address it is reached at now.
            proxy = egress_access(session.project, vm, endpoint.host)
            if only_secrets:
                report = await deliver_secrets(endpoint, vm, values, broker=broker)
            else:
                report = await provision(endpoint, vm, values, broker=broker, egress_proxy=proxy)
        except SandError as exc:
            # The error already carries the failing step's tail, redacted (provisioner).
            failed = f"[{exc.layer}] {exc}".splitlines()
            record_provision_log(session.project, vm.name, what, False, failed)
            raise
        record_provision_log(session.project, vm.name, what, True, log_lines(report))
        # After the delivery finished: a boot before this instant cannot have emptied it.
        return secrets.delivered(vm)

    return provision_vm


def log_lines(report: ProvisionReport) -> list[str]:
    """A provisioning report as the lines of the VM's last provisioning log."""
    lines = [f"{report.changed} step(s) changed something ({report.seconds:.1f}s)"]
    if not report.ran:
        lines.append("  nothing to run: every step's inputs as the guest last ran them")
    for step in report.steps:
        if not step.ran:
            lines.append(f"  {step.name}: skipped (its inputs unchanged since it last ran)")
            continue
        said = f"{len(step.changes)} change(s)" if step.changes else "unchanged"
        lines.append(f"  {step.name}: {said} ({step.seconds:.1f}s)")
        lines.extend(f"    {change}" for change in step.changes)
    return lines
