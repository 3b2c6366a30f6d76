"""What PVE stores when a config is written, and the types it answers with: a layer over
FakePve (fakepve 0.5.0 keeps a PUT's form values as written, strings included).

Read in qemu-server (9.2; the same in 8.3.x, which PVE 8.4 ships) and pve-common:

* **Types** (``PVE::QemuServer::parse_vm_config`` → ``check_type``): a key the config
  schema types ``integer`` is answered as a number (``int($1)``), a ``boolean`` as 1 or 0;
  every other value (``number`` ones such as ``cpulimit`` too) as the text stored. So
  ``GET …/config`` says ``"cores": 2`` after a PUT of ``cores=2``, and ``memory`` (a
  property string since 8.1) stays text.
* **Drives** (``PVE::API2::Qemu`` ``$check_drive_param`` → ``PVE::QemuServer::Drive``
  ``parse_drive``/``print_drive``): each written drive is parsed and printed again: the
  volume first, the options sorted, ``size`` through ``PVE::JSONSchema::parse_size``
  (no unit: bytes) and ``format_size`` (the largest exact unit, bytes when none is).
* **Cloud-init drives** (``create_disks``): ``<storage>:cloudinit`` allocates
  ``vm-<vmid>-cloudinit`` (``.qcow2`` on a file storage), 4 MiB
  (``CLOUDINIT_DISK_SIZE``), and stores ``<storage>:vm-<vmid>-cloudinit,media=cdrom``
  (``format`` dropped); a second one dies "<key> - cloud-init drive is already attached
  at '<other>'".
* **Who may write a drive** (``update_vm_api``'s ``$check_drive_perms``, 8 and 9 alike):
  a cloud-init drive takes ``VM.Config.Cloudinit`` *and* ``VM.Config.CDROM`` on the VM, a
  CD-ROM ``VM.Config.CDROM``, any other drive ``VM.Config.Disk`` (``create_vm`` checks
  none of these: its drives need ``Datastore.AllocateSpace`` on their storage).
* **NICs** (``update_vm_api``/``create_vm`` → ``PVE::QemuServer::Network::parse_net``):
  a ``netN`` written without a MAC gets a random one (``random_ether_addr`` with the
  datacenter's ``mac_prefix``, ``BC:24:11`` by default) and is printed ``model=MAC`` first.
* **maxdisk** (``vmstatus`` → ``Drive::bootdisk_size``): the ``size`` of the first disk of
  ``boot: order=`` that is not a CD-ROM (legacy ``boot``, or none: ``bootdisk``), through
  ``parse_size``; 0 when that disk has no size or there is no boot disk. A storage's row
  in ``/cluster/resources``: ``disk``/``maxdisk`` its used and total bytes, once sized.
"""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web
from fakepve import PveError
from fakepve.qemu import DRIVE_KEY, is_cdrom, join_drive, split_drive, volume_ref, with_mac
from fakepve.storage import _is_file

# $confdesc's (and $confdesc_cloudinit's) integer and boolean keys, 8.3.13 and 9.2 alike
# (allow-ksm is 9.1's: an unknown key on 8 never gets this far).
INTEGER_KEYS = frozenset(
    ("balloon", "cores", "cpuunits", "migrate_speed", "shares", "smp", "snaptime", "sockets",
     "vcpus")
)  # fmt: skip
BOOLEAN_KEYS = frozenset(
    ("acpi", "allow-ksm", "autostart", "ciupgrade", "freeze", "keephugepages", "kvm",
     "localtime", "numa", "onboot", "protection", "reboot", "tablet", "tdf", "template")
)  # fmt: skip
CLOUDINIT_DISK_SIZE = 4 << 20
# PVE::JSONSchema::parse_size; the verbose suffixes (KiB…) came with pve-common 9.
_SIZE = {
    8: re.compile(r"^(\d+(?:\.\d+)?)([KMGT])?$"),
    9: re.compile(r"^(\d+(?:\.\d+)?)([KMGT](?:iB)?)?$"),
}
_UNIT = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# The answers whose values are a config's (vm_config, vm_pending, the snapshot's config).
_CONFIG_PATH = re.compile(
    r"^/api2/json/nodes/[^/]+/qemu/\d+/(config|pending|snapshot/[^/]+/config)$"
)


def parse_size(text: object, major: int = 9) -> int | None:
    """PVE::JSONSchema::parse_size: bytes, None when it is no size."""
    found = _SIZE[major].match(str(text))
    if not found:
        return None
    unit = found[2] or ""
    return int(float(found[1]) * _UNIT.get(unit[:1], 1))


def format_size(size: int) -> str:
    """PVE::JSONSchema::format_size: the largest unit that divides exactly."""
    text = str(size)
    for unit in ("K", "M", "G", "T"):
        if size % 1024:
            break
        size //= 1024
        text = f"{size}{unit}"
    return text


def typed(key: str, value: Any) -> Any:
    """PVE::QemuServer::check_type's value for a config key (a value it cannot read: as is)."""
    text = str(value)
    if key in INTEGER_KEYS and re.fullmatch(r"\d+", text):
        return int(text)
    if key in BOOLEAN_KEYS:
        if text == "1" or text.lower() in ("on", "yes", "true"):
            return 1
        if text == "0" or text.lower() in ("off", "no", "false"):
            return 0
    return value


def is_cloudinit(volume: str) -> bool:
    """A ``<storage>:cloudinit`` to allocate (create_disks' ``$volname eq 'cloudinit'``)."""
    return volume == "cloudinit" or volume_ref(volume)[1] == "cloudinit"


def has_cloudinit(config: dict[str, Any], skip: str) -> str | None:
    """PVE::QemuConfig::has_cloudinit: the key of a cloud-init drive other than ``skip``."""
    for key in sorted(config):
        if key != skip and DRIVE_KEY.match(key) and config[key] is not None:
            volume = split_drive(config[key])[0]
            if re.search(r"[:/](?:vm-\d+-)?cloudinit(?:\.\w+)?$", volume) or is_cloudinit(volume):
                return key
    return None


class StoredForms:
    """Mixin of RigPve (after the fidelity layer, before FakePve in the MRO)."""

    pve_version: int

    # --- writes -------------------------------------------------------------------------

    def _printed_drive(self, value: object) -> str:
        """parse_drive + print_drive: options sorted, the size in format_size's form."""
        volume, props = split_drive(str(value))
        if "size" in props:
            size = parse_size(props["size"], self.pve_version)
            if size is None:
                raise PveError(400, "Parameter verification failed.", {"size": "invalid format"})
            props["size"] = format_size(size)
        return str(join_drive(volume, props))

    def _alloc_cloudinit(self, vmid: int, key: str, value: str, taken: dict[str, Any]) -> str:
        """create_disks' cloud-init branch: allocate ``vm-<vmid>-cloudinit``."""
        volume, props = split_drive(value)
        other = has_cloudinit(taken, key)
        if other:
            raise PveError(500, f"{key} - cloud-init drive is already attached at '{other}'")
        sid = volume_ref(volume)[0]
        store = self.storages.get(sid or "")  # type: ignore[attr-defined]
        if store is None:
            raise PveError(500, f"storage '{sid}' does not exist")
        fmt = props.pop("format", None) or ("qcow2" if _is_file(store) else "raw")
        name = f"vm-{vmid}-cloudinit" + (f".{fmt}" if _is_file(store) else "")
        volumes = store.setdefault("volumes", {})
        if name in volumes:
            raise PveError(500, f"volume '{sid}:{name}' already exists")
        volumes[name] = {"content": "images", "format": fmt, "size": CLOUDINIT_DISK_SIZE,
                         "vmid": vmid}  # fmt: skip
        if "avail" in store:
            store["avail"] -= CLOUDINIT_DISK_SIZE
        props["media"] = "cdrom"
        props.pop("size", None)
        return str(join_drive(f"{sid}:{name}", props))

    def _stored_forms(
        self, vmid: int, values: dict[str, Any], taken: dict[str, Any]
    ) -> tuple[dict[str, Any], list[str]]:
        """The written values as PVE stores them, and the cloud-init volumes allocated."""
        out, made = dict(values), []
        for key, value in values.items():
            if re.fullmatch(r"net\d+", key):
                out[key] = with_mac(value)
            elif DRIVE_KEY.match(key):
                volume = split_drive(str(value))[0]
                if is_cloudinit(volume):
                    out[key] = self._alloc_cloudinit(vmid, key, str(value), {**taken, **out})
                    made.append(out[key].split(",")[0])
                elif not re.fullmatch(r"(?:[^/:\s]+:)?\d+(?:\.\d+)?", volume):
                    out[key] = self._printed_drive(value)  # a new disk keeps its <size> form
        return out, made

    def _check_drive_perms(self, user: str, vmid: int, values: dict[str, Any]) -> None:
        """update_vm_api's $check_drive_perms on each drive written: a cloud-init drive takes
        VM.Config.Cloudinit and VM.Config.CDROM, a CD-ROM VM.Config.CDROM, a disk
        VM.Config.Disk (fakepve, reading the stored form, would ask CDROM alone)."""
        if user == "root@pam":
            return
        for key in sorted(values):
            if not DRIVE_KEY.match(key):
                continue
            volume, props = split_drive(str(values[key]))
            if is_cloudinit(volume) or has_cloudinit({key: values[key]}, ""):
                privs: tuple[str, ...] = ("VM.Config.Cloudinit", "VM.Config.CDROM")
            elif is_cdrom(volume, props):
                privs = ("VM.Config.CDROM",)
            else:
                privs = ("VM.Config.Disk",)
            for priv in privs:
                self.require(user, f"/vms/{vmid}", priv)  # type: ignore[attr-defined]

    async def _apply_config(self, vm: Any, user: str, p: dict[str, Any]) -> None:
        self._check_drive_perms(user, vm.vmid, p)
        pending = {k: v for k, v in vm.pending.items() if v is not None}
        p, made = self._stored_forms(vm.vmid, p, {**vm.config, **pending})
        try:
            await super()._apply_config(vm, user, p)  # type: ignore[misc]
        except BaseException:
            for volid in made:  # create_disks frees what it made when the update dies
                self._qm_free(volid)  # type: ignore[attr-defined]
            raise

    def _qm_new_drive(self, vmid: int, key: str, value: str, default: str | None) -> Any:
        """create_vm's create_disks: a cloud-init drive by PVE's name; other drives as
        fakepve makes them, printed as print_drive does."""
        volume, props = split_drive(value)
        if is_cloudinit(volume):
            sid = volume_ref(volume)[0] or default
            drive = join_drive(f"{sid}:cloudinit", props)
            stored = self._alloc_cloudinit(vmid, key, drive, {})
            return stored, [stored.split(",")[0]]
        made, volids = super()._qm_new_drive(vmid, key, value, default)  # type: ignore[misc]
        return self._printed_drive(made), volids

    # --- reads --------------------------------------------------------------------------

    def _vm_maxdisk(self, vm: Any) -> int:
        """vmstatus' maxdisk: Drive::bootdisk_size of the config."""
        config = vm.config
        boot = str(config.get("boot") or "")
        if boot.startswith("order="):
            disks = [d for d in re.split(r"[;,\s]+", boot[len("order=") :]) if DRIVE_KEY.match(d)]
        else:
            disks = [str(config["bootdisk"])] if config.get("bootdisk") else []
        for key in disks:
            if not config.get(key):
                continue
            volume, props = split_drive(config[key])
            if is_cdrom(volume, props) or not volume:
                continue
            return parse_size(props.get("size", ""), self.pve_version) or 0
        return 0

    def _storage_resource(self, node: str, name: str) -> dict[str, Any] | None:
        """A storage's ``/cluster/resources`` row: ``disk`` and ``maxdisk`` are its used and
        total bytes (pvestatd's storage status) once a test sized it (``avail`` or
        ``total``); fakepve's 0 of 100 GiB otherwise (it sums volumes as a thick
        storage would, which an LVM-thin pool is not)."""
        item: dict[str, Any] | None = super()._storage_resource(node, name)  # type: ignore[misc]
        store = self.storages[name]  # type: ignore[attr-defined]
        sized = "avail" in store or "total" in store
        if item is not None and sized and item.get("status") == "available":
            total, used, _avail = self._space(store)  # type: ignore[attr-defined]
            item.update(disk=used, maxdisk=total)
        return item

    def _build_app(self) -> web.Application:
        app: web.Application = super()._build_app()  # type: ignore[misc]

        @web.middleware
        async def retype(request: web.Request, handler: Any) -> web.StreamResponse:
            response: web.StreamResponse = await handler(request)
            if request.method != "GET" or not _CONFIG_PATH.match(request.path):
                return response
            if not isinstance(response, web.Response) or response.status != 200:
                return response
            body = json.loads(bytes(response.body))  # type: ignore[arg-type]
            data = body.get("data")
            if isinstance(data, dict):
                body["data"] = {k: typed(k, v) for k, v in data.items()}
            elif isinstance(data, list):  # vm_pending: value and pending of each key
                for item in data:
                    for field in ("value", "pending"):
                        if field in item:
                            item[field] = typed(str(item.get("key")), item[field])
            return web.json_response(body)

        app.middlewares.append(retype)
        return app
