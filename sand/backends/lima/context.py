"""What every Lima operation needs: backend name, project, the host runner and limactl,
and the little a backend remembers between its calls in one run."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sand.backends.lima.limayaml import BundleMount
from sand.backends.lima.runner import HostRunner
from sand.backends.lima.shared import SharedReads
from sand.desired import DesiredVM
from sand.guest.endpoint import JumpHost


@dataclass
class Timeouts:
    """Seconds per limactl call (and per recovery wait)."""

    list: float = 120.0
    create: float = 1800.0  # may download an image
    clone: float = 1800.0  # copies a disk
    start: float = 1200.0  # Lima itself waits up to 10 min for the guest
    stop: float = 300.0
    short: float = 120.0
    # How long recovery waits for limactl children a killed run left running.
    recovery_wait: float = 600.0


@dataclass
class ForkBatch:
    """The forks of one source this run copies with one stop of it (see ``fork.py``):
    its names in plan order; the futures are made when the first of them is created."""

    forks: list[DesiredVM]
    made: dict[str, asyncio.Future[Any]] = field(default_factory=dict)  # name -> fork.Made
    restarted: asyncio.Future[None] | None = None  # the source is as it was found again
    task: asyncio.Task[None] | None = None


@dataclass
class Ctx:
    name: str
    project: str
    runner: HostRunner
    limactl: str = "limactl"
    # The LIMA_HOME a local runner sets (None: the environment's, or ~/.lima).
    lima_home: str | None = None
    clone_parallelism: int = 2
    jump: JumpHost | None = None  # the remote Lima host, as the guests' SSH jump
    key_dir: Path | None = None  # where local copies of remote identities go (None: state)
    bundle: BundleMount | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    # The limactl version is read with the first listing only; its warning is repeated.
    version_checked: bool = False
    version_warnings: list[str] = field(default_factory=list)
    # Every instance name in the last listing (None: none trusted yet).
    seen: set[str] | None = None
    golden: dict[str, str] = field(default_factory=dict)  # golden fingerprint -> instance
    local_keys: dict[str, str] = field(default_factory=dict)  # remote path -> local copy
    # This project's lease record as the last listing showed it ("" none; None: not
    # observed yet): a lease taken later is fresh only if it still reads the same.
    lease_seen: str | None = None
    # Per-name reads shared by the creates that ask together (observe.observe_one; of
    # its Inspected, a layer above this one).
    reads: SharedReads[Any] | None = None
    # One batch of forks at a time per source (each stops, copies, starts it): source -> lock.
    fork_locks: dict[str, asyncio.Lock] = field(default_factory=dict)
    # The forks this run's plan creates, grouped per source: fork name -> its batch.
    fork_batches: dict[str, ForkBatch] = field(default_factory=dict)

    # Lima makes its own SSH key (_config/user) at the first create of a LIMA_HOME and
    # runs ssh-keygen with no lock: two first creates at once race, and one fails
    # "already exists". A run's first create goes alone (vmops.create_instance).
    first_create: asyncio.Lock = field(default_factory=asyncio.Lock)
    created_one: bool = False

    def __post_init__(self) -> None:
        # Creates and clones copy an image or a base's disk: a few at once, or they contend for I/O.
        self.clone_slots = asyncio.Semaphore(self.clone_parallelism)
