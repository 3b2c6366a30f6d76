"""The agents' state of a whole fleet, read again and again (the board, ``sand sync``).

Each read is the deep check's one guest exchange per running VM that declares agents
(:func:`sand.survey.health.probe_guest`): its health answers come along for free and
are not used here. The plan it reads from is one the caller already has (the board's
refresh, a sync run's), so the read adds no listing; and the endpoint of each guest
is remembered from one read to the next, so after the first a read costs no backend
request either (a Proxmox endpoint is two: the VM's config and its guest agent's
addresses). An endpoint is forgotten as soon as its guest does not answer, or when
the VM it was for changed (its identity, node, address or boot).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sand.agentstate import AgentReport
from sand.backends.protocol import Backend
from sand.plan.model import Plan, VMChange
from sand.survey.health import Endpoints, Findings, Target, check_health, probe_guest, targets

# The board reads on every refresh: a guest that does not answer within this costs
# the refresh this much at most, and its row shows no agent state.
READ_TIMEOUT = 8.0


def _reports(t: Target) -> bool:
    """Whether ``t``'s guest has hooks to report with: sand provisioned it, with agents."""
    marker = t.observed.marker
    return bool(t.vm.provision and t.vm.agents and marker and marker.guest_fingerprint)


@dataclass
class AgentReader:
    timeout: float = READ_TIMEOUT
    endpoints: Endpoints = field(default_factory=dict)

    async def read(self, plan: Plan, backends: Mapping[str, Backend]) -> dict[str, AgentReport]:
        """VM name -> what its agents reported, for every running VM of ``plan`` that
        declares agents and answered. A guest ``plan`` itself asked (its idle read) is
        not asked again when the run left it as it was, or only put it to sleep: what
        it said then is what its agents still say."""
        changes = {c.vm: c for c in plan.changes}
        mine = [t for t in targets(plan, backends) if _reports(t)]
        said = {t.vm.name: plan.agents[t.vm.name] for t in mine if _told(changes[t.vm.name], plan)}
        todo = [t for t in mine if t.vm.name not in said]
        asked = {t.vm.name for t in todo} | set(said)
        live = {key for key in self.endpoints if key[0] in asked}  # VMs gone or stopped: theirs go
        for key in set(self.endpoints) - live:
            del self.endpoints[key]

        async def probe(target: Target, timeout: float) -> Findings:
            return await probe_guest(target, timeout, self.endpoints)

        found = await check_health(todo, timeout=self.timeout, probe=probe)
        reports = {vm: f.agents for vm, f in found.items() if f.agents is not None}
        return said | reports


def _told(change: VMChange, plan: Plan) -> bool:
    """Whether ``plan``'s own exchange with the guest tells what its agents say now."""
    return change.vm in plan.agents and (change.sleep is not None or not change.acts)
