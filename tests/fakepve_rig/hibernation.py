"""Hibernation as qemu-server does it: a layer over FakePve (fakepve 0.5.0 only stops the
VM and locks it ``suspended``).

Read in qemu-server (9.2; 8.3.x the same): ``PVE::API2::Qemu`` ``vm_suspend``,
``vm_resume``; ``PVE::QemuServer::RunState::vm_suspend``; ``PVE::QemuConfig``
``__snapshot_save_vmstate``, ``find_vmstate_storage``; ``PVE::QemuServer::vm_start``.

* ``statestorage`` without ``todisk``: the schema's ``requires => 'todisk'``, 400
  "Parameter verification failed." (``todisk``: "missing property required by
  'statestorage'"); given with ``todisk=0`` it is ignored.
* With ``todisk``, before the task: "Cannot suspend HA managed VM to disk",
  ``VM.Config.Disk`` on the VM, "cannot suspend VM to disk due to passed-through PCI
  device(s)…", then ``Datastore.AllocateSpace`` on the state storage (``statestorage``,
  else ``find_vmstate_storage``: ``vmstatestorage``, else a storage of the VM's disks,
  shared before local, file-based first, else ``local``).
* The ``qmsuspend`` task: "VM is locked (…)" unless the config is free; the config
  locked ``suspending``; a state volume ``vm-<vmid>-state-suspend-<date>`` (``.raw`` on a
  file storage) of 2 × RAM + 500 MiB (``__snapshot_save_vmstate``'s reserve for the live
  save) allocated and named in ``vmstate`` (with ``runningmachine``/``runningcpu``); the
  save (``savevm_secs`` PVE seconds); then QEMU quits and the lock becomes ``suspended``.
  A save that fails frees the volume and drops ``vmstate`` but leaves ``suspending``.
* ``vm_start`` of a VM locked ``suspended`` (or with a ``vmstate``) resumes it: the
  state is loaded, its volume freed, and ``lock``, ``vmstate``, ``runningmachine`` and
  ``runningcpu`` dropped -- from ``status/start`` as from ``status/resume`` (a
  ``qmresume`` task that runs ``vm_start``).
"""

from __future__ import annotations

import time
from typing import Any

from fakepve import PveError, TaskError
from fakepve.qemu import drives_of, is_cdrom, volume_ref
from fakepve.storage import _is_file

MIB = 1 << 20
DRIVER_STATE_MIB = 500  # __snapshot_save_vmstate: "assume 500MB is enough"
RUNNING_MACHINE = "pc-q35-9.2+pve1"
SAVE_FAILED = "query-savevm failed with error 'No space left on device'"


def state_bytes(config: dict[str, Any]) -> int:
    """The state volume's size: get_current_memory × 2 + 500, in MiB."""
    memory = str(config.get("memory") or "512").split(",")[0].removeprefix("current=")
    return (int(memory) * 2 + DRIVER_STATE_MIB) * MIB


class Hibernation:
    """Mixin of RigPve (before the fidelity layer and FakePve in the MRO)."""

    # PVE seconds the save of the state takes (the lock reads ``suspending`` meanwhile).
    savevm_secs: float = 0.0
    # The next saves fail as a full state volume does (a test's fault).
    savevm_failures: int = 0

    def _vmstate_storage(self, config: dict[str, Any]) -> str:
        """PVE::QemuConfig::find_vmstate_storage."""
        if config.get("vmstatestorage"):
            return str(config["vmstatestorage"])
        found: dict[bool, str] = {}
        used = sorted(
            {
                sid
                for _k, volume, props in drives_of(config)
                if not is_cdrom(volume, props) and (sid := volume_ref(volume)[0])
            }
        )
        for sid in used:
            store = self.storages.get(sid, {})  # type: ignore[attr-defined]
            shared = bool(store.get("shared"))
            if shared not in found or _is_file(store):
                found[shared] = sid
        return found.get(True) or found.get(False) or "local"

    async def _do_suspend(self, vm: Any, user: str, p: dict[str, Any]) -> Any:
        if p.get("statestorage") and "todisk" not in p:
            raise PveError(
                400,
                "Parameter verification failed.",
                {"todisk": "missing property required by 'statestorage'"},
            )
        if str(p.get("todisk", "0")).lower() not in ("1", "true", "yes", "on"):
            plain = {k: v for k, v in p.items() if k != "statestorage"}
            return await super()._do_suspend(vm, user, plain)  # type: ignore[misc]
        self._need_running(vm)  # type: ignore[attr-defined]
        if vm.ha_managed:
            raise PveError(500, "Cannot suspend HA managed VM to disk")
        self.require(user, f"/vms/{vm.vmid}", "VM.Config.Disk")  # type: ignore[attr-defined]
        if any(k.startswith("hostpci") and k[7:].isdigit() for k in vm.config):
            raise PveError(
                500,
                "cannot suspend VM to disk due to passed-through PCI device(s), which lack the"
                " possibility to save/restore their internal state",
            )
        storage = str(p.get("statestorage") or self._vmstate_storage(vm.config))
        self.require(user, f"/storage/{storage}", "Datastore.AllocateSpace")  # type: ignore[attr-defined]

        async def body() -> None:
            if vm.lock:
                raise TaskError(f"VM is locked ({vm.lock})")
            volid = self._alloc_state(vm, storage)
            vm.lock = vm.config["lock"] = "suspending"
            vm.config.update(vmstate=volid, runningmachine=RUNNING_MACHINE, runningcpu="host")
            await self.pause(self.savevm_secs)  # type: ignore[attr-defined]
            if self.savevm_failures:
                self.savevm_failures -= 1
                self._qm_free(volid)  # type: ignore[attr-defined]
                for key in ("vmstate", "runningmachine", "runningcpu"):
                    vm.config.pop(key, None)
                raise TaskError(SAVE_FAILED)
            if vm.lock != "suspending":
                raise TaskError("lock changed unexpectedly")
            vm.status = vm.qmpstatus = "stopped"
            vm.lock = vm.config["lock"] = "suspended"

        return await self.task(vm.node, "qmsuspend", vm.vmid, user, body, vm=vm, lock=False)  # type: ignore[attr-defined]

    def _alloc_state(self, vm: Any, sid: str) -> str:
        """vdisk_alloc of the state volume (fakepve's wording when the storage is full)."""
        store = self.storages.get(sid)  # type: ignore[attr-defined]
        if store is None:
            raise TaskError(f"storage '{sid}' does not exist")
        size = state_bytes(vm.config)
        name = f"vm-{vm.vmid}-state-suspend-{time.strftime('%Y-%m-%d')}"
        name += ".raw" if _is_file(store) else ""
        if "avail" in store:
            if size > store["avail"]:
                raise TaskError(f"unable to write to storage '{sid}': No space left on device")
            store["avail"] -= size
        store.setdefault("volumes", {})[name] = {
            "content": "images", "format": "raw", "size": size, "vmid": vm.vmid,
        }  # fmt: skip
        return f"{sid}:{name}"

    def _resumed(self, vm: Any) -> None:
        """vm_start's end for a resumed VM: the state volume freed, the lock and the
        state's keys dropped."""
        volid = vm.config.pop("vmstate", None)
        if volid:
            self._qm_free(str(volid))  # type: ignore[attr-defined]
        for key in ("lock", "runningmachine", "runningcpu"):
            vm.config.pop(key, None)
        vm.lock = None

    async def _do_start(self, vm: Any, user: str, p: dict[str, Any]) -> Any:
        """vm_start: a VM locked ``suspended`` or holding a ``vmstate`` resumes from it."""
        if vm.lock != "suspended" and not vm.config.get("vmstate"):
            return await super()._do_start(vm, user, p)  # type: ignore[misc]
        return await self.task(vm.node, "qmstart", vm.vmid, user, self._resume_body(vm), vm=vm)  # type: ignore[attr-defined]

    def _resume_body(self, vm: Any) -> Any:
        async def body() -> None:
            if vm.status == "running":
                raise TaskError(f"VM {vm.vmid} already running")
            self._resumed(vm)
            vm.status = vm.qmpstatus = "running"
            vm.started_at = time.time()

        return body

    async def _do_resume(self, vm: Any, user: str, p: dict[str, Any]) -> Any:
        """vm_resume: of a VM locked ``suspended``, a ``qmresume`` task running vm_start;
        else "VM <id> not running" unless it runs (fakepve's resume of a paused VM)."""
        if vm.lock != "suspended":
            return await super()._do_resume(vm, user, p)  # type: ignore[misc]
        return await self.task(vm.node, "qmresume", vm.vmid, user, self._resume_body(vm), vm=vm)  # type: ignore[attr-defined]
