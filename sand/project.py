"""A project as a run sees it: manifest → desired → backends, journal and lock.

``apply`` and the per-VM verbs both stand on this room: open the session (load and
validate the manifest, build the backends, take the lock if asked) and observe
every backend at once, one listing each.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from sand.backends.abilities import ListsEarly, capabilities_of
from sand.backends.capabilities import Capabilities
from sand.backends.factory import make_backends
from sand.backends.protocol import Backend
from sand.desired import DesiredState, build_desired
from sand.desired.host import HostLocale
from sand.desired_cache import cached_desired, keep_desired
from sand.errors import ManifestError, SandError
from sand.manifest import LoadedManifest, load_manifest, load_manifest_bytes
from sand.manifest.backends import BackendConfig
from sand.manifest.repository import repository_problems
from sand.observed import Observation
from sand.provision.bundle import bundle_digest, machine_digest
from sand.state.journal import Journal, journal_path
from sand.state.lock import ProjectLock
from sand.state.paths import project_dir
from sand.workitems.gather import gather_items


@dataclass
class Session:
    # The manifest as loaded, or how to load it: a session whose desired state came
    # from the cache loads it only if something asks (a plan of no changes never does).
    source: LoadedManifest | Callable[[], LoadedManifest]
    desired: DesiredState
    backends: dict[str, Backend] = field(default_factory=dict)
    lock: ProjectLock | None = None
    journal: Journal = field(init=False)

    def __post_init__(self) -> None:
        # One journal per session: every operation and the replay write through it.
        self.journal = Journal(journal_path(self.desired.project))

    @property
    def loaded(self) -> LoadedManifest:
        if not isinstance(self.source, LoadedManifest):
            self.source = self.source()
        return self.source

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


def desired_from(loaded: LoadedManifest, host: HostLocale | None = None) -> DesiredState:
    # Read from the world like a listing, before the pure expansion (sand.workitems).
    items, notes = gather_items(
        loaded.manifest, loaded.directory, from_repository=loaded.from_repository
    )
    desired = build_desired(
        loaded,
        bundle_digest=bundle_digest(),
        machine_digest=machine_digest(),
        host=host,
        items=items,
    )
    return dataclasses.replace(desired, notes=tuple(notes) + desired.notes) if notes else desired


@dataclass(frozen=True)
class Read:
    """A manifest as a session starts from it: loaded, or (from the desired-state cache)
    its desired state and backend configs, the manifest itself loaded when asked for."""

    source: LoadedManifest | Callable[[], LoadedManifest]
    desired: DesiredState | None  # None: not built yet
    configs: Mapping[str, BackendConfig]
    directory: Path


def _read(path: str | Path) -> Read:
    """The manifest at ``path`` through the desired-state cache (``sand.desired_cache``):
    a hit reads neither YAML nor a model; a miss loads it as always and keeps what it
    built for the next run."""
    file = Path(path)
    try:
        raw = file.read_bytes()
    except OSError:
        loaded = load_manifest(file)  # raises the error that names the file
        return Read(loaded, None, loaded.manifest.backends, loaded.directory)
    here = HostLocale.detect()
    inputs = (here.timezone, here.locale, bundle_digest(), machine_digest())
    # The bytes read now, loaded once whoever asks first (the session, the state).
    load = functools.cache(partial(load_manifest_bytes, raw, file))
    hit = cached_desired(file, raw, inputs, lambda: load().manifest)
    if hit is not None:
        desired, configs = hit
        return Read(load, desired, configs, file.parent)
    loaded = load_manifest_bytes(raw, file)
    desired = desired_from(loaded, here)
    if not loaded.manifest.generators:  # work items are read anew for every plan
        keep_desired(file, raw, inputs, loaded, desired)
    return Read(loaded, desired, loaded.manifest.backends, loaded.directory)


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
    if loaded is None and host_dir is None:
        read = _read(path)
    else:
        loaded = loaded if loaded is not None else load_manifest(path)
        if host_dir is not None:
            loaded = dataclasses.replace(loaded, host_dir=host_dir)
            # The second lock behind sand sync's refusal of a revision (a copy changed
            # since it was taken in, a path that skipped it): a manifest from a
            # repository reaches no backend, host file or credential the host has not
            # allowed.
            refused = repository_problems(loaded, host_dir)
            if refused:
                raise ManifestError(refused)
        read = Read(loaded, None, loaded.manifest.backends, loaded.directory)
    project = read.desired.project if read.desired else _loaded(read).manifest.project
    early: dict[str, Backend] = {}
    if send_listings and not lock:
        early = make_backends(read.configs, project, read.directory)
        for backend in early.values():
            if isinstance(backend, ListsEarly):
                backend.send_listing()
    desired = read.desired or desired_from(_loaded(read))
    session = Session(read.source, desired)
    if lock:
        session.lock = ProjectLock(project_dir(desired.project) / "apply.lock")
        session.lock.acquire(wait=lock_wait)
    try:
        session.backends = early or make_backends(read.configs, project, read.directory)
    except BaseException:
        if session.lock:
            session.lock.release()
        raise
    return session


def _loaded(read: Read) -> LoadedManifest:
    assert isinstance(read.source, LoadedManifest)  # no desired state: it was loaded
    return read.source


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
