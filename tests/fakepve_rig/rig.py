"""FakePveRig: one fakepve on 127.0.0.1 (OS-picked port) served from a private thread.

Seeded like a small real cluster sand is meant for: node(s), an LVM-thin
storage ``local-lvm`` in pool ``sand``, a template VM 9000 ``debian-13`` (4 GiB
disk, cloud-init drive, operator tag ``golden``) in the pool, and an API token
``sand@pve!ci`` holding only the privileges sand needs, on the pool, the
storage and the bridge (``acl="pool"``), written to a 0600 token file.

State changes go through :meth:`FakePveRig.run` (on the server's loop), so
tests never race the server thread.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import proxmoxer
from fakepve import FakeVm

from tests.fakepve_rig.pve import Request, RigPve

__all__ = ["SAND_PRIVILEGES", "FakePveRig", "Request"]

if TYPE_CHECKING:
    from sand.backends.proxmox.backend import ProxmoxBackend
    from sand.desired import DesiredVM
    from sand.manifest.backends import ProxmoxConfig

T = TypeVar("T")
HOST = "127.0.0.1"
GIB = 1 << 30
MIB = 1 << 20

# What sand's token needs, by path (the doctor checks the same list).
SAND_PRIVILEGES: dict[str, tuple[str, ...]] = {
    "/pool/{pool}": (
        "VM.Allocate",
        "VM.Audit",
        "VM.Clone",
        "VM.Config.CPU",
        "VM.Config.Cloudinit",
        "VM.Config.Disk",
        "VM.Config.HWType",
        "VM.Config.Memory",
        "VM.Config.Network",
        "VM.Config.Options",
        "VM.PowerMgmt",
        "VM.Snapshot",  # forks only (issue 29): the source's snapshot, made and removed
        "VM.GuestAgent.Audit",
        "Pool.Audit",  # else PVE leaves `pool` out of the listing (fields.py)
        "Datastore.AllocateSpace",
        "Datastore.Audit",
    ),
    "/storage/{storage}": ("Datastore.AllocateSpace", "Datastore.Audit"),
    "/sdn/zones/localnetwork/{bridge}": ("SDN.Use",),
}


# The profile a rig serves unless told (SAND_PVE_VERSION=8 runs every Proxmox test on 8).
DEFAULT_PVE_VERSION = int(os.environ.get("SAND_PVE_VERSION", "9"))


def sand_privileges(pve_version: int) -> dict[str, tuple[str, ...]]:
    """SAND_PRIVILEGES as a PVE of that major names them (8: VM.Monitor reads the agent)."""
    if pve_version >= 9:
        return dict(SAND_PRIVILEGES)
    swap = {"VM.GuestAgent.Audit": "VM.Monitor"}
    return {path: tuple(swap.get(p, p) for p in privs) for path, privs in SAND_PRIVILEGES.items()}


def _is_lease(vm: FakeVm) -> bool:
    return "sand-lease" in str(vm.config.get("tags") or "").split(";")


def _mac(vmid: int, n: int = 0) -> str:
    return f"BC:24:11:{(vmid >> 8) & 0xFF:02X}:{vmid & 0xFF:02X}:{n:02X}"


async def _cancel_the_rest() -> None:
    """Cancel what still runs on the server's loop (PVE tasks a test left running), so
    closing the loop does not drop pending tasks ("Task was destroyed but it is
    pending!" at exit)."""
    rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    if rest:
        await asyncio.wait(rest, timeout=5)


class FakePveRig:
    """A running fakepve plus helpers. Attributes:

    ``url``, ``host``, ``port``, ``ca_file`` (its certificate), ``token_id``,
    ``token_file`` (0600), ``pool``, ``storage``, ``bridge``, ``nodes``,
    ``template_vmid``, ``template_name``, ``pve`` (the RigPve, a FakePve), ``log``
    (every request as :class:`Request`), ``workdir`` (identity key, token file).
    """

    pool = "sand"
    storage = "local-lvm"
    bridge = "vmbr0"
    template_vmid = 9000
    template_name = "debian-13"

    def __init__(
        self,
        pki: tuple[str, str],
        workdir: Path,
        *,
        nodes: Sequence[str] = ("pve1",),
        time_scale: float = 0.0,
        acl: str = "pool",
        shared_storage: bool = False,
        pve_version: int | None = None,
        host: str = HOST,
        port: int = 0,
    ) -> None:
        self.workdir = workdir
        self.pve_version = pve_version or DEFAULT_PVE_VERSION
        workdir.mkdir(parents=True, exist_ok=True)
        self.ca_file = pki[0]
        self.nodes = tuple(nodes)
        self.pve = RigPve(
            user="root@pam",
            password=secrets.token_hex(8),
            host=host,
            port=port,
            pve_version=self.pve_version,
        )
        self.pve.time_scale = time_scale
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._serve, name="fakepve-rig", daemon=True)
        self._thread.start()
        if shared_storage:
            self.storage = "shared-lvm"
        self.run(self._seed, acl, shared_storage)
        self.call(self.pve.start(*pki))
        self.host, self.port = host, int(self.pve.port)
        self.url = f"https://{host}:{self.port}"
        self.token_id = "sand@pve!ci"
        self.token_file = self.add_token(self.token_id, acl=acl)
        self.identity = self._make_identity()

    # --- running -------------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        """Run a coroutine (e.g. ``pve.hold_config_lock(...)``) on the server's loop."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run a plain function on the server's loop (safe against concurrent requests)."""

        async def wrapped() -> T:
            return fn(*args, **kwargs)

        return self.call(wrapped())

    def stop(self) -> None:
        try:
            self.call(self.pve.stop(), timeout=30)
            self.call(_cancel_the_rest(), timeout=30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
            if not self._thread.is_alive():
                self._loop.close()  # its selector and descriptors now, not at some GC

    # --- seeding ---------------------------------------------------------------------

    def _seed(self, acl: str, shared: bool) -> None:
        pve = self.pve
        pve.nodes = {}
        for node in self.nodes:
            pve.add_node(node)
        if shared:
            pve.storages[self.storage] = {
                "type": "rbd",
                "pool": "rbd",
                "active": 1,
                "content": "images,rootdir",
                "files": set(),
                "shared": 1,
            }
        pve.pools[self.pool] = set()
        pve.pool_info[self.pool] = {"comment": "sand's VMs", "storage": {self.storage}}
        self._add_vm(
            self.template_vmid,
            self.template_name,
            node=self.nodes[0],
            template=True,
            status="stopped",
            disk=4 * GIB,
            memory_mib=1024,
            cores=1,
            tags="golden",
            description="Debian 13 golden image, built by ops.",
        )

    def _add_vm(
        self,
        vmid: int,
        name: str,
        *,
        node: str | None = None,
        pool: str | None = "sand",
        status: str = "running",
        template: bool = False,
        cores: int = 2,
        memory_mib: int = 2048,
        disk: int = 8 * GIB,
        tags: str | None = None,
        description: str | None = None,
        protection: bool = False,
        lock: str | None = None,
        config: dict[str, Any] | None = None,
    ) -> FakeVm:
        base = "base" if template else "vm"
        cfg: dict[str, Any] = {
            "cores": cores,
            "sockets": 1,
            "memory": memory_mib,
            "scsi0": f"{self.storage}:{base}-{vmid}-disk-0,size={disk // MIB}M",
            "ide2": f"{self.storage}:vm-{vmid}-cloudinit,media=cdrom",
            "net0": f"virtio={_mac(vmid)},bridge={self.bridge}",
            "boot": "order=scsi0",
            "scsihw": "virtio-scsi-single",
            "ostype": "l26",
            "agent": "1",
        }
        if template:
            cfg["template"] = 1
        if tags:
            cfg["tags"] = tags
        if description:
            cfg["description"] = description
        if protection:
            cfg["protection"] = 1
        if lock:
            cfg["lock"] = lock
        cfg.update(config or {})
        vm = self.pve.add_vm(
            vmid,
            name,
            node=node or self.nodes[0],
            status=status,
            config=cfg,
            template=template,
            lock=lock,
            pool=pool,
        )
        if pool:
            self.pve._sync_pools()
        return vm

    def seed_vm(self, vmid: int, name: str, **kwargs: Any) -> FakeVm:
        """Add a VM (not sand's unless ``tags``/``description`` say so). Keywords: node,
        pool ("sand"; None for none), status, template, cores, memory_mib, disk (bytes),
        tags, description, protection, lock, config (extra keys)."""
        return self.run(self._add_vm, vmid, name, **kwargs)

    def seed_managed(
        self,
        vm: DesiredVM,
        vmid: int,
        *,
        fingerprint: str | None = None,
        guest_fingerprint: str | None = None,
        project: str | None = None,
        identity: int | None = None,
        **kwargs: Any,
    ) -> FakeVm:
        """A VM as sand leaves it converged for ``vm`` (marker in tags and description),
        sized as ``vm`` asks. ``identity`` other than vmid makes a copied marker."""
        from sand.backends.proxmox import description as desc
        from sand.backends.proxmox import marker as mk
        from sand.backends.proxmox import units
        from sand.backends.proxmox.firewall import MARKER_KEY, denies, with_firewall
        from sand.observed import Marker

        marker = Marker(
            project or vm.project,
            vm.name,
            str(identity or vmid),
            vm.fingerprint if fingerprint is None else fingerprint,
            vm.guest_fingerprint if guest_fingerprint is None else guest_fingerprint,
            vm.image,
        )
        kwargs.setdefault("cores", vm.cpus)
        kwargs.setdefault("memory_mib", units.memory_mib(vm.memory))
        kwargs.setdefault("disk", vm.disk)
        kwargs.setdefault("status", "running" if vm.state == "running" else "stopped")
        kwargs.setdefault("protection", vm.protect)
        if vm.cpu is not None:  # the CPU type create sets (a deep read compares it)
            kwargs["config"] = {"cpu": vm.cpu, **kwargs.get("config", {})}
        extra_tags = kwargs.pop("extra_tags", ())
        note = kwargs.pop("note", "")
        kwargs["tags"] = mk.join_tags([*mk.marker_tags(marker), *extra_tags])
        # The enforced egress policy as create records it beside the marker (firewall.py).
        egress = {MARKER_KEY: vm.infra()["egress"]} if vm.egress is not None else {}
        kwargs["description"] = desc.merge_description(
            note, marker, protect=vm.protect or None, **egress
        )
        if denies(vm.egress):
            net0 = f"virtio={_mac(vmid)},bridge={self.bridge}"
            kwargs["config"] = {"net0": with_firewall(net0), **kwargs.get("config", {})}
        seeded = self.seed_vm(vmid, vm.name, **kwargs)
        if denies(vm.egress):
            self.run(self._seed_firewall, seeded, vm)
        return seeded

    def _seed_firewall(self, seeded: FakeVm, vm: DesiredVM) -> None:
        """The VM's firewall as ``firewall.write`` leaves it for ``vm``'s deny policy (the
        next plan reads it back: docs/egress.md#drift)."""
        from sand.backends.proxmox.firewall import IPSET, OPTIONS, RULE_COMMENT, rules_of

        assert vm.egress is not None
        conf = self.pve.firewall_config("vm", seeded.node, seeded.vmid)
        conf["options"].update(OPTIONS)
        if vm.egress.cidrs:
            # PVE stores a single address without its /32 (or /128).
            kept = [re.sub(r"/(32|128)$", "", c) for c in vm.egress.cidrs]
            conf["ipset"][IPSET] = [{"cidr": c} for c in reversed(kept)]
            conf["ipset_comments"][IPSET] = RULE_COMMENT
            conf["rules"][0:0] = rules_of(vm.egress, None)  # the CIDRs' rule

    def add_token(self, token_id: str, *, acl: str = "pool") -> Path:
        """Register an API token and write its 0600 file. acl: "pool" (least privilege),
        "root" (everything on /), "none" (nothing granted)."""
        secret = secrets.token_hex(16)

        def add() -> None:
            self.pve.apitokens[token_id] = secret
            if acl == "root":
                self.pve.grant(token_id, "/", *_all_privileges(self.pve_version))
            elif acl == "pool":
                self.grant_sand_privileges(token_id)
            else:  # an ACL that grants nothing (fakepve allows all until the first grant)
                self.pve.grant(token_id, "/nodes/" + self.nodes[0])

        self.run(add)
        path = self.workdir / f"token-{token_id.replace('@', '_').replace('!', '_')}"
        path.write_text(f"{token_id}={secret}\n", encoding="utf-8")
        path.chmod(0o600)
        return path

    def proxmoxer(self, token_file: Path | None = None) -> Any:
        """A proxmoxer client of the rig with a token (sand's unless ``token_file``)."""
        token_id, _, secret = (token_file or self.token_file).read_text().strip().partition("=")
        user, _, name = token_id.partition("!")
        return proxmoxer.ProxmoxAPI(
            self.host,
            port=self.port,
            user=user,
            token_name=name,
            token_value=secret,
            verify_ssl=self.ca_file,
        )

    def grant_sand_privileges(self, token_id: str, *, without: Iterable[str] = ()) -> None:
        skip = set(without)
        names = {"pool": self.pool, "storage": self.storage, "bridge": self.bridge}
        for template, privs in sand_privileges(self.pve_version).items():
            chosen = [p for p in privs if p not in skip]
            if chosen:
                self.pve.grant(token_id, template.format(**names), *chosen)

    def set_user_tag_access(self, allow: str, *allow_list: str) -> None:
        """``/cluster/options`` user-tag-access (existing, list, none, free)."""
        self.run(self.pve.set_user_tag_access, allow, tuple(allow_list))

    # --- images for template builds -------------------------------------------------

    image_storage = "local"

    def allow_image_import(self, storage: str = "local") -> None:
        """Let a file storage hold disk images to import (``pvesm set --content ...,import``,
        which a fresh PVE's ``local`` lacks)."""

        def allow() -> None:
            store = self.pve.storages[storage]
            content = [c for c in str(store.get("content", "")).split(",") if c]
            store["content"] = ",".join([*content, "import"])

        self.run(allow)

    def store_image(self, filename: str, *, storage: str = "local", size: int = GIB) -> None:
        """An image already on the storage (``<storage>:import/<filename>``)."""
        self.run(self.pve.store_file, storage, filename, size, "import")

    def images(self, storage: str = "local") -> list[str]:
        """The import volumes on a storage, as volume names (``import/<file>``)."""
        volumes = self.run(lambda: dict(self.pve.storages[storage].get("volumes", {})))
        return sorted(name for name, vol in volumes.items() if vol.get("content") == "import")

    def grant_template_build(self, token_id: str, *, download: bool = True) -> None:
        """What ``sand template build`` needs beyond sand's role: reading the image storage
        and, to download, its AllocateTemplate and the node's Sys.AccessNetwork. fakepve's
        download-url also insists on Sys.Audit and Sys.Modify on / (PVE takes either)."""
        self.grant(token_id, f"/storage/{self.image_storage}", "Datastore.Audit")
        if download:
            self.grant(token_id, f"/storage/{self.image_storage}", "Datastore.AllocateTemplate")
            self.grant(token_id, f"/nodes/{self.nodes[0]}", "Sys.AccessNetwork")
            self.grant(token_id, "/", "Sys.Audit", "Sys.Modify")

    def grant(self, token_id: str, path: str, *privs: str) -> None:
        self.run(self.pve.grant, token_id, path, *privs)

    def revoke_all(self, token_id: str) -> None:
        """The token keeps authenticating but holds no privilege (lost its pool rights):
        its listing is empty, while ``/cluster/nextid?vmid=`` still tells taken ids."""
        self.run(lambda: self.pve.acl.__setitem__(token_id, []))

    def destroy_by_hand(self, vmid: int) -> None:
        """Remove a VM at once, as an operator's ``qm destroy --purge`` would (its disks
        freed, its id free again): what sand observed is then gone behind its back."""
        from fakepve.qemu import drives_of

        def destroy() -> None:
            vm = self.pve.vm(vmid)
            for _key, volume, _props in drives_of(vm.config):
                self.pve._qm_free(volume)
            self.pve.vms.remove(vm)
            self.pve._pool_leave(vmid)

        self.run(destroy)

    def leave_pool(self, vmid: int) -> None:
        """Take a VM out of every pool (an operator's move): a pool token no longer sees it."""
        self.run(self.pve._pool_leave, vmid)

    # --- guest agent, faults, time ----------------------------------------------------

    def set_agent_ip(self, vmid: int, ip: str | None, *, mac: str | None = None) -> None:
        """The guest agent runs and reports ``ip`` on net0's MAC (None: no address yet)."""

        def set_it() -> None:
            vm = self.pve.vm(vmid)
            nic_mac = mac or str(vm.config.get("net0", "")).split(",")[0].partition("=")[2]
            addrs = [{"ip-address": "127.0.0.1", "ip-address-type": "ipv4", "prefix": 8}]
            lo = {"name": "lo", "hardware-address": "00:00:00:00:00:00", "ip-addresses": addrs}
            eth: dict[str, Any] = {"name": "eth0", "hardware-address": nic_mac.lower()}
            eth["ip-addresses"] = []
            if ip:
                eth["ip-addresses"] = [
                    {"ip-address": ip, "ip-address-type": "ipv4", "prefix": 24},
                    {"ip-address": "fe80::1", "ip-address-type": "ipv6", "prefix": 64},
                ]
            vm.agent = {"interfaces": [lo, eth]}

        self.run(set_it)

    def stop_agent(self, vmid: int) -> None:
        self.run(setattr, self.pve.vm(vmid), "agent", None)

    def reboot(self, vmid: int) -> None:
        """Reboot a VM as an operator would (``qm reboot``): its uptime starts again."""
        vm = self.pve.vm(vmid)
        self.call(self.pve._do_reboot(vm, "root@pam", {}))

    def set_uptime(self, vmid: int, seconds: float) -> None:
        """Make a running VM look as if it started ``seconds`` ago."""
        self.run(setattr, self.pve.vm(vmid), "started_at", time.time() - seconds)

    def fail(
        self,
        method: str,
        suffix: str,
        status: int | None = None,
        message: str | None = None,
        *,
        error: str | None = None,
        times: int | None = None,
    ) -> None:
        """Answer requests whose path ends with ``suffix`` with an error (fakepve's fail())."""
        self.run(self.pve.fail, method, suffix, status, message, error=error, times=times)

    def hold_writes(self, method: str, suffix: str, field: str, value: str) -> None:
        """Hold unanswered, and never carry out, each ``method`` request to a path ending
        in ``suffix`` that sets ``field`` to ``value`` (until :meth:`drop_held`)."""
        self.run(self.pve.hold_writes, method, suffix, field, value)

    def delay_requests(self, method: str, suffix: str, secs: float) -> None:
        """Answer each ``method`` request to a path ending in ``suffix`` ``secs`` real
        seconds late, whatever the time scale."""
        self.run(self.pve.delay_requests, method, suffix, secs)

    def delay_answers(self, method: str, suffix: str, secs: float) -> None:
        """Answer each ``method`` request to a path ending in ``suffix`` at once, and
        deliver the answer ``secs`` real seconds later."""
        self.run(self.pve.delay_answers, method, suffix, secs)

    def drop_held(self) -> None:
        """Held requests fail as dropped connections; nothing is held from now on."""
        self.run(self.pve.drop_held)

    def hide_from_listing(self, *vmids: int) -> None:
        """``GET /cluster/resources`` leaves these VMs out from now on (each node's own
        VM list still shows them)."""
        self.run(lambda: self.pve.hidden_from_listing.update(vmids))

    def clear_faults(self) -> None:
        def clear() -> None:
            self.pve.failures.clear()
            self.pve.flaky_network()
            self.pve.slow_network(0.0)
            self.pve.regain_quorum()

        self.run(clear)

    def set_time_scale(self, scale: float) -> None:
        self.run(setattr, self.pve, "time_scale", scale)

    def fast_forward(self) -> None:
        """Every task and wait under way ends now, as if its PVE seconds had passed: a
        30-second clone a killed sand left behind is done, and the next run goes on at
        once. Tasks started afterwards take their set time again."""
        self.run(self.pve.fast_forward)

    def set_task_secs(self, task_type: str, secs: float) -> None:
        """PVE seconds a task type (qmclone, qmstart, qmshutdown, qmdestroy, resize...) takes."""
        self.run(self.pve.task_secs.__setitem__, task_type, secs)

    def task_warnings(self, task_type: str, vmid: int | str, *lines: str) -> None:
        """The next such task for vmid ("*": every one) ends ``WARNINGS: n``."""
        self.run(self.pve.task_warnings.__setitem__, (task_type, str(vmid)), list(lines))

    def task_failures(self, task_type: str, vmid: int | str, *messages: str) -> None:
        """The next len(messages) such tasks for vmid ("*": any) fail with these messages."""
        self.run(self.pve.task_failures.__setitem__, (task_type, str(vmid)), list(messages))

    # --- inspecting ---------------------------------------------------------------------

    @property
    def log(self) -> list[Request]:
        return list(self.pve.log)

    def clear_log(self) -> None:
        self.run(self.pve.log.clear)

    def requests(
        self, method: str | None = None, path: str | None = None, *, contains: str | None = None
    ) -> list[Request]:
        """Logged requests, by method, exact path (without /api2/json) or a path substring."""
        return [
            r
            for r in self.log
            if (method is None or r.method == method)
            and (path is None or r.path == path)
            and (contains is None or contains in r.path)
        ]

    def count(
        self, method: str | None = None, path: str | None = None, *, contains: str | None = None
    ) -> int:
        return len(self.requests(method, path, contains=contains))

    def vm(self, vmid: int) -> FakeVm | None:
        return self.run(self.pve.vm, vmid)

    def vms(self) -> list[FakeVm]:
        """The VMs, without templates and sand's lease objects (no VM of anybody's)."""
        return self.run(
            lambda: [vm for vm in self.pve.vms if not vm.template and not _is_lease(vm)]
        )

    def lease_vms(self) -> list[FakeVm]:
        """sand's lease objects (``sand.backends.proxmox.lease``)."""
        return self.run(lambda: [vm for vm in self.pve.vms if _is_lease(vm)])

    def templates(self) -> list[FakeVm]:
        return self.run(lambda: [vm for vm in self.pve.vms if vm.template])

    def vms_named(self, name: str) -> list[FakeVm]:
        return [vm for vm in self.vms() if vm.name == name]

    # --- sand ------------------------------------------------------------------------------

    def _make_identity(self) -> Path:
        import asyncssh

        key = asyncssh.generate_private_key("ssh-ed25519", comment="sand-test")
        path = self.workdir / "id_ed25519"
        key.write_private_key(str(path), "openssh")
        path.chmod(0o600)
        key.write_public_key(str(path) + ".pub", "openssh")
        return path

    def backend_fields(self, **overrides: Any) -> dict[str, Any]:
        """The manifest's backend entry for this fake (a dict, YAML-ready)."""
        fields: dict[str, Any] = {
            "type": "proxmox",
            "host": self.host,
            "port": self.port,
            "pool": self.pool,
            "storage": self.storage,
            "bridge": self.bridge,
            "template": self.template_name,
            "token_file": str(self.token_file),
            "ca_file": self.ca_file,
            "identity": str(self.identity),
        }
        if len(self.nodes) == 1:
            fields["node"] = self.nodes[0]
        else:
            fields["nodes"] = list(self.nodes)
        fields.update(overrides)
        return {k: v for k, v in fields.items() if v is not None}

    def backend_config(self, **overrides: Any) -> ProxmoxConfig:
        from sand.manifest.backends import ProxmoxConfig

        return ProxmoxConfig.model_validate(self.backend_fields(**overrides))

    def manifest(
        self,
        vms: Sequence[dict[str, Any]],
        *,
        project: str = "demo",
        backend: str = "pve",
        defaults: dict[str, Any] | None = None,
        **backend_overrides: Any,
    ) -> dict[str, Any]:
        """A manifest (dict) with one backend pointing at this fake."""
        return {
            "apiVersion": "sand/v1",
            "project": project,
            "backends": {backend: self.backend_fields(**backend_overrides)},
            "defaults": {"provision": False, **(defaults or {})},
            "vms": list(vms),
        }

    def desired(self, vms: Sequence[dict[str, Any]], **kwargs: Any) -> list[DesiredVM]:
        """DesiredVMs for manifest entries (``{"name": "a", "memory": "2GiB", ...}``)."""
        from sand.desired import build_desired
        from sand.manifest.models import Manifest

        manifest = Manifest.model_validate(self.manifest(vms, **kwargs))
        return list(build_desired(manifest).vms)

    def make_backend(
        self, project: str = "demo", *, name: str = "pve", fast: bool = True, **overrides: Any
    ) -> ProxmoxBackend:
        """sand's backend for this fake; ``fast`` shrinks retry, poll and wait times."""
        from sand.backends.proxmox import make_proxmox_backend
        from sand.backends.proxmox.backend import ProxmoxBackend
        from sand.backends.proxmox.tasks import PollPolicy
        from sand.retrying import Backoff

        backend = make_proxmox_backend(
            name, self.backend_config(**overrides), project=project, manifest_dir=self.workdir
        )
        assert isinstance(backend, ProxmoxBackend)
        if fast:
            ctx = backend.ctx
            ctx.client.retry = Backoff(attempts=4, initial=0.01, factor=2.0, cap=0.05)
            ctx.client.poll = PollPolicy(initial=0.01, factor=1.5, cap=0.05)
            ctx.client.http_timeout = 5.0
            ctx.agent_poll = (0.01, 0.05)
            ctx.unlock_poll = (0.01, 0.05)
            ctx.timeouts.agent = 3.0
            ctx.timeouts.unlock = 5.0
        return backend


def _all_privileges(pve_version: int) -> list[str]:
    from fakepve import shapes

    from tests.fakepve_rig.fidelity import ONLY_ON

    other = ONLY_ON[17 - pve_version]
    every = dict.fromkeys((*shapes.PRIVILEGES, *ONLY_ON[pve_version]))
    return [p for p in every if p not in other]


def quote(value: str) -> str:
    return urllib.parse.quote(value, safe="")
