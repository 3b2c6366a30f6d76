"""Real machines behind fakepve's VMs: what PVE does with a VM's process, handed to a
hypervisor when the rig has one (``pve.hypervisor``; None: fakepve's own model only).

* ``qmstart``: PVE generates the cloud-init drive from the config (``vm_start`` →
  ``PVE::QemuServer::Cloudinit::apply_cloudinit_config``) and starts the VM's QEMU; the task
  ends when the process runs, not when the guest has booted;
* ``qmshutdown``: with the agent enabled PVE sends ``guest-shutdown`` through it
  (``vm_stop`` → ``qga_cmd``) and waits for the process to exit up to the timeout;
* ``qmstop``: the process is killed;
* ``agent/<command>``: PVE passes the command through QMP to the guest's qemu-guest-agent
  (``PVE::API2::Qemu::Agent``), answering 500 "QEMU guest agent is not running" when the
  agent does not answer its sync;
* ``qmclone``: the new VM's disk is a copy of its source's (the hypervisor is told which);
* the firewall: pve-firewall compiles every VM's firewall config into the node's rules
  (``PVE::Firewall::compile``, again within seconds of each change), so the hypervisor is
  given the VM's firewall (its options, rules and ipsets, and the datacenter's options)
  at ``qmstart`` and again after every firewall write through the API (``refilter``);
  ``GET …/qemu/{vmid}/firewall/log`` serves the VM's lines of the host's firewall log
  (fakepve serves none), as ``PVE::API2::Firewall::VM`` ``log`` reads
  ``/var/log/pve-firewall.log`` (``dump_fw_logfile``: ``since``/``until``, ``start``/``limit``).
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Protocol

from fakepve import PveError, TaskError


class AgentDown(Exception):
    """The guest's agent did not answer (not started yet, or the guest is gone)."""


class Hypervisor(Protocol):
    def cloned(self, source: int, vmid: int) -> None: ...

    def start(self, vmid: int, config: dict[str, Any], firewall: dict[str, Any]) -> None: ...

    def refilter(self, vmid: int, config: dict[str, Any], firewall: dict[str, Any]) -> None: ...

    async def shutdown(self, vmid: int, timeout: float) -> bool: ...

    def kill(self, vmid: int) -> None: ...

    def runs(self, vmid: int) -> bool: ...

    async def agent(self, vmid: int, command: str) -> Any: ...


# The agent commands passed through (those without arguments, as sand's reads are).
PASSED = {
    "ping": "guest-ping",
    "info": "guest-info",
    "get-osinfo": "guest-get-osinfo",
    "get-host-name": "guest-get-host-name",
    "network-get-interfaces": "guest-network-get-interfaces",
    "get-time": "guest-get-time",
    "get-timezone": "guest-get-timezone",
    "get-users": "guest-get-users",
    "get-vcpus": "guest-get-vcpus",
    "get-fsinfo": "guest-get-fsinfo",
}


class Machines:
    """Mixin for RigPve (before the fidelity layer and FakePve in its bases)."""

    hypervisor: Hypervisor | None = None

    async def _qm_clone(self, v: dict[str, Any], user: str) -> Any:
        upid = await super()._qm_clone(v, user)  # type: ignore[misc]
        if self.hypervisor is not None:
            self.hypervisor.cloned(int(v["vmid"]), int(v["newid"]))
        return upid

    async def _do_start(self, vm: Any, user: str, p: dict[str, Any]) -> Any:
        hv = self.hypervisor
        if hv is None:
            return await super()._do_start(vm, user, p)  # type: ignore[misc]
        upid = await super()._do_start(vm, user, p)  # type: ignore[misc]
        task = self.tasks[upid]  # type: ignore[attr-defined]

        async def boot() -> None:
            while task["status"] != "stopped":
                await asyncio.sleep(0.01)
            if task.get("exitstatus") == "OK":
                # after apply_pending: the config it runs
                hv.start(vm.vmid, dict(vm.config), self.guest_firewall(vm.vmid))

        if task["status"] == "stopped":
            await boot()
        else:  # a timed task (time_scale > 0) ends later
            self._background.add(asyncio.ensure_future(boot()))  # type: ignore[attr-defined]
        return upid

    async def _powerdown(self, vm: Any, p: dict[str, Any]) -> Any:
        hv = self.hypervisor
        if hv is None or not hv.runs(vm.vmid):
            return await super()._powerdown(vm, p)  # type: ignore[misc]
        timeout = float(p.get("timeout") or self.shutdown_default_timeout)  # type: ignore[attr-defined]
        if await hv.shutdown(vm.vmid, timeout):
            vm.status = vm.qmpstatus = "stopped"
            return None
        if str(p.get("forceStop", "0")) in ("1", "true"):
            hv.kill(vm.vmid)
            vm.status = vm.qmpstatus = "stopped"
            return "VM still running - terminating now with SIGTERM"
        raise TaskError("VM quit/powerdown failed - got timeout")

    async def _do_stop(self, vm: Any, user: str, p: dict[str, Any]) -> Any:
        upid = await super()._do_stop(vm, user, p)  # type: ignore[misc]
        if self.hypervisor is not None and vm.status == "stopped":
            self.hypervisor.kill(vm.vmid)
        return upid

    def guest_firewall(self, vmid: int) -> dict[str, Any]:
        """What pve-firewall compiles a VM's rules from: the datacenter's options
        (``cluster.fw``) and the VM's own firewall config (``<vmid>.fw``)."""
        fw = self.firewall_config  # type: ignore[attr-defined]
        return copy.deepcopy({"cluster": fw("cluster")["options"], "vm": fw("vm", vmid=vmid)})

    def _refilter(self, scope: str, values: dict[str, Any]) -> None:
        hv = self.hypervisor
        if hv is None or scope not in ("cluster", "vm"):
            return
        for vm in list(self.vms):  # type: ignore[attr-defined]
            if scope == "cluster" or vm.vmid == int(values["vmid"]):
                hv.refilter(vm.vmid, dict(vm.config), self.guest_firewall(vm.vmid))

    def _routes_firewall_log(self) -> list[tuple[str, str, Any]]:
        return [("GET", "/nodes/{node}/qemu/{vmid}/firewall/log", self._firewall_log)]

    async def _firewall_log(self, values: dict[str, Any], user: str) -> list[dict[str, Any]]:
        vm = self.find(values["node"], values["vmid"])  # type: ignore[attr-defined]
        host = getattr(self.hypervisor, "firewall", None)
        denials = host.reader.of(vm.vmid) if host is not None else []
        since, until = int(values.get("since") or 0), int(values.get("until") or 0)
        lines = [
            d.line()
            for d in denials
            if (not since or d.at >= since) and (not until or d.at <= until)
        ]
        start, limit = int(values.get("start") or 0), int(values.get("limit") or 50)
        return [{"n": start + i + 1, "t": t} for i, t in enumerate(lines[start : start + limit])]

    async def _agent_call(self, match: Any, values: dict[str, Any]) -> Any:
        hv = self.hypervisor
        vm = self.find(values["node"], values["vmid"])  # type: ignore[attr-defined]
        if hv is None or not hv.runs(vm.vmid):
            return await super()._agent_call(match, values)  # type: ignore[misc]
        command = match.template.rsplit("/", 1)[1]
        if command not in PASSED:
            raise PveError(501, f"the rig passes no agent command '{command}' to a real guest")
        if vm.status != "running" or str(vm.config.get("agent", "0")).split(",")[0] in ("0", ""):
            raise PveError(500, "QEMU guest agent is not running")
        try:
            return {"result": await hv.agent(vm.vmid, PASSED[command])}
        except AgentDown as exc:
            raise PveError(500, "QEMU guest agent is not running") from exc


# fakepve's firewall writes (FirewallApi), each followed by the hypervisor's refilter.
FIREWALL_WRITES = (
    "_fw_options_put", "_fw_rule_create", "_fw_rule_update", "_fw_rule_delete",
    "_fw_ipset_create", "_fw_ipset_delete", "_fw_ip_create", "_fw_ip_update", "_fw_ip_delete",
)  # fmt: skip


def _then_refilter(name: str) -> Any:
    async def write(self: Machines, scope: str, values: dict[str, Any], user: str) -> Any:
        result = await getattr(super(Machines, self), name)(scope, values, user)
        self._refilter(scope, values)
        return result

    return write


for _name in FIREWALL_WRITES:
    setattr(Machines, _name, _then_refilter(_name))
