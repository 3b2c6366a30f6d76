"""What every Proxmox operation needs: backend name, project, config, API client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand.backends.proxmox.client import PveClient
from sand.backends.proxmox.coalesce import Fresh
from sand.backends.proxmox.errors import ProxmoxError
from sand.manifest.backends import ProxmoxConfig


@dataclass
class Timeouts:
    """Seconds per operation (PVE tasks and waits)."""

    clone: float = 1800.0
    config: float = 120.0
    resize: float = 600.0
    start: float = 300.0
    shutdown: float = 180.0  # the ACPI shutdown before a forced stop
    stop: float = 120.0
    # Hibernating writes the VM's RAM to its state volume; resuming reads it back.
    hibernate: float = 600.0
    delete: float = 600.0
    unlock: float = 600.0  # waiting for another task's lock (clone, backup) to clear
    agent: float = 300.0  # waiting for the guest agent to report an address
    download: float = 1800.0  # PVE downloading a cloud image (template build)
    template: float = 600.0  # creating a VM from an image, converting it to a template


# Clones at once per backend when the manifest names no ``clone_parallelism``, by the
# storage the clones' disks go to (docs/backends/proxmox.md, "Clones at once", says why).
LOCAL_STORAGE_CLONES = 10  # a node-local lock held for the allocation only: apply's bound
SHARED_STORAGE_CLONES = 2  # the cluster-wide lock: a third clone waiting on it timed out


def is_shared(row: Mapping[str, Any] | None) -> bool:
    """A ``/cluster/resources`` storage row says its storage is shared (Ceph, NFS, iSCSI...)."""
    return row is not None and str(row.get("shared", 0)) not in ("0", "", "False", "false")


def clones_at_once(configured: int | None, storage: Mapping[str, Any] | None) -> int:
    """The manifest's ``clone_parallelism``, or the default for the clones' storage (one
    not known, e.g. unreadable, counts as local: the listing would fail the run anyway)."""
    if configured is not None:
        return configured
    return SHARED_STORAGE_CLONES if is_shared(storage) else LOCAL_STORAGE_CLONES


@dataclass
class Ctx:
    name: str
    project: str
    config: ProxmoxConfig
    client: PveClient
    identity: Path  # SSH private key for guests; its .pub goes to cloud-init
    timeouts: Timeouts = field(default_factory=Timeouts)
    deep_reads: int = 8  # concurrent per-VM reads during observe
    agent_poll: tuple[float, float] = (1.0, 10.0)  # backoff while waiting for the agent
    unlock_poll: tuple[float, float] = (0.5, 5.0)
    # Memory promised to VMs this backend is creating, per node (placement).
    reserved: dict[str, int] = field(default_factory=dict)
    # Guest addresses handed out to provisioning: ip -> vmid.
    addresses: dict[str, str] = field(default_factory=dict)
    # The last listing observe read: preflight finds templates in it without a request.
    last_rows: list[Mapping[str, Any]] | None = None
    # The token's ``/access/permissions`` as preflight's refusals read them (None: not
    # read in this preflight): its other checks take them from here, not a second read.
    permissions: Mapping[str, Any] | None = None
    # Templates' configs read since the last observation, one read each (a batch of
    # clones of one template reads it once): (node, vmid) -> the read.
    template_configs: dict[tuple[str, str], asyncio.Future[dict[str, Any]]] = field(
        default_factory=dict
    )
    # Project leases this backend holds now (``lease``): while one is held no other run
    # of the project writes, so what the observation saw is all there is.
    leases_held: int = 0
    # The storage rows preflight read (``/cluster/resources?type=storage``): they size
    # the clone slots without a read of their own.
    storage_rows: list[Mapping[str, Any]] | None = None
    # How many clones at once this backend chose (None until its first clone).
    clones_chosen: int | None = None
    # The configs the last observation's deep reads returned (``GET …/pending``: the
    # current values, with the digest of the whole file), by vmid: an update under the
    # project's lease writes against them instead of reading the VM again.
    observed_configs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    observed_at: float = 0.0  # time.monotonic() of the last observation's listing
    # The next vmid this process's clones count from (``vmids.py``): None until the
    # batch's one ``/cluster/nextid``; each observation starts a new batch.
    next_vmid: int | None = None
    # The token was seen to hold Pool.Audit on the pool (pool_audit.py): not read again.
    pool_audit_seen: bool = False

    def __post_init__(self) -> None:
        self._clone_slots: (
            tuple[asyncio.AbstractEventLoop, asyncio.Task[asyncio.Semaphore]] | None
        ) = None
        self._fresh: tuple[asyncio.AbstractEventLoop, Fresh[Any]] | None = None
        self.cloning_ids: set[int] = set()  # vmids this process is cloning into now
        self._vmid_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    def vmid_lock(self) -> asyncio.Lock:
        """One id taken at a time (``vmids.py``); one lock per event loop."""
        loop = asyncio.get_running_loop()
        if self._vmid_lock is None or self._vmid_lock[0] is not loop:
            self._vmid_lock = (loop, asyncio.Lock())
        return self._vmid_lock[1]

    def fresh_listing(self, fetch: Callable[[], Awaitable[Any]]) -> Fresh[Any]:
        """The listing shared by creates' duplicate checks (one per event loop)."""
        loop = asyncio.get_running_loop()
        if self._fresh is None or self._fresh[0] is not loop:
            self._fresh = (loop, Fresh(fetch))
        return self._fresh[1]

    async def clone_slots(self) -> asyncio.Semaphore:
        """At most ``clones_at_once`` clones at once; one semaphore per event loop (a
        backend may outlive an ``asyncio.run``), sized by the first clone that asks."""
        loop = asyncio.get_running_loop()
        if self._clone_slots is None or self._clone_slots[0] is not loop:
            self._clone_slots = (loop, loop.create_task(self._sized_slots()))
        return await asyncio.shield(self._clone_slots[1])

    async def _sized_slots(self) -> asyncio.Semaphore:
        storage = None
        if self.config.clone_parallelism is None:
            storage = await self._storage_row(self.config.storage)
        self.clones_chosen = clones_at_once(self.config.clone_parallelism, storage)
        return asyncio.Semaphore(self.clones_chosen)

    async def _storage_row(self, name: str) -> Mapping[str, Any] | None:
        rows = self.storage_rows
        if rows is None:
            try:
                rows = await self.client.get("cluster/resources", type="storage") or []
            except ProxmoxError:
                return None
        return next((r for r in rows if isinstance(r, Mapping) and r.get("storage") == name), None)


def in_pool(ctx: Ctx, row: Mapping[str, Any]) -> bool:
    """In this backend's pool. A row in no pool is not: a VM sand made joined the pool
    with its clone, so an operator (or another tool) took it out."""
    return row.get("pool") == ctx.config.pool
