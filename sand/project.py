"""A project as a run sees it: manifest → desired → backends, journal and lock.

``apply`` and the per-VM verbs both stand on this room: open the session (load and
validate the manifest, build the backends, take the lock if asked) and observe
every backend at once, one listing each.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sand.backends.abilities import ListsEarly, capabilities_of
from sand.backends.capabilities import Capabilities
from sand.backends.protocol import Backend
from sand.desired import DesiredState, build_desired
from sand.errors import ManifestError, SandError
from sand.manifest import LoadedManifest, load_manifest
from sand.manifest.repository import repository_problems
from sand.observed import Observation
from sand.state.journal import Journal, journal_path
from sand.state.lock import ProjectLock
from sand.state.paths import project_dir


@dataclass
class Session:
    loaded: LoadedManifest
    desired: DesiredState
    backends: dict[str, Backend] = field(default_factory=dict)
    lock: ProjectLock | None = None
    journal: Journal = field(init=False)

    def __post_init__(self) -> None:
        # One journal per session: every operation and the replay write through it.
        self.journal = Journal(journal_path(self.desired.project))

    @property
    def project(self) -> str:
        return self.desired.project

    def capabilities(self) -> Mapping[str, Capabilities]:
        return {name: capabilities_of(b) for name, b in self.backends.items()}

    async def close(self) -> None:
        for backend in self.backends.values():
            await backend.close()
        self.journal.close()  # held open for the run's records
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def desired_from(loaded: LoadedManifest) -> DesiredState:
    # here, not at the top: sand plan starts without it
    from sand.provision.bundle import bundle_digest, machine_digest

    return build_desired(loaded, bundle_digest=bundle_digest(), machine_digest=machine_digest())


def open_session(
    path: str | Path,
    *,
    lock: bool,
    lock_wait: float = 0.0,
    loaded: LoadedManifest | None = None,
    host_dir: Path | None = None,
    send_listings: bool = False,
) -> Session:
    """Load and validate the manifest, build backends; take the project lock if asked.
    ``loaded``: the manifest at ``path`` as already loaded (by a caller that knows the
    file has not changed since); ``host_dir``: where the manifest's relative host paths
    point (default: beside it); ``send_listings``: each backend that can sends its
    listing at once, answered while the desired state is built (``sand plan``)."""
    # here, not at the top: sand plan starts without it
    from sand.backends.factory import make_backends

    loaded = loaded if loaded is not None else load_manifest(path)
    if host_dir is not None:
        loaded = dataclasses.replace(loaded, host_dir=host_dir)
        # The second lock behind sand sync's refusal of a revision (a copy changed
        # since it was taken in, a path that skipped it): a manifest from a repository
        # reaches no backend, host file or credential the host has not allowed.
        refused = repository_problems(loaded, host_dir)
        if refused:
            raise ManifestError(refused)
    early: dict[str, Backend] = {}
    if send_listings and not lock:
        early = make_backends(loaded.manifest, loaded.directory)
        for backend in early.values():
            if isinstance(backend, ListsEarly):
                backend.send_listing()
    desired = desired_from(loaded)
    session = Session(loaded, desired)
    if lock:
        session.lock = ProjectLock(project_dir(desired.project) / "apply.lock")
        session.lock.acquire(wait=lock_wait)
    try:
        session.backends = early or make_backends(loaded.manifest, loaded.directory)
    except BaseException:
        if session.lock:
            session.lock.release()
        raise
    return session


async def observe_all(
    backends: Mapping[str, Backend], desired: DesiredState
) -> dict[str, Observation]:
    async def one(name: str, backend: Backend) -> Observation:
        try:
            return await backend.observe(desired.for_backend(name))
        except SandError as exc:
            # A backend that cannot be read is "unknown", never "empty": an
            # empty answer would plan the deletion or re-creation of every VM.
            return Observation(backend=name, vms=(), unknown_reason=str(exc))

    names = list(backends)
    results = await asyncio.gather(*(one(n, backends[n]) for n in names))
    return dict(zip(names, results, strict=True))
