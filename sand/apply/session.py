"""One reconcile's context: manifest → desired → backends, journal and lock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sand.backends.protocol import Backend, Mutability
from sand.desired import DesiredState, build_desired
from sand.manifest import LoadedManifest, load_manifest
from sand.state.journal import Journal
from sand.state.lock import ProjectLock
from sand.state.paths import project_dir


@dataclass
class Session:
    loaded: LoadedManifest
    desired: DesiredState
    backends: dict[str, Backend] = field(default_factory=dict)
    lock: ProjectLock | None = None

    @property
    def project(self) -> str:
        return self.desired.project

    @property
    def journal(self) -> Journal:
        return Journal(project_dir(self.project) / "journal.jsonl")

    def policies(self) -> Mapping[str, Mapping[str, Mutability]]:
        return {name: b.field_policy for name, b in self.backends.items()}

    async def close(self) -> None:
        for backend in self.backends.values():
            await backend.close()
        if self.lock is not None:
            self.lock.release()
            self.lock = None


def desired_from(loaded: LoadedManifest) -> DesiredState:
    from sand.provision.bundle import bundle_digest

    return build_desired(loaded, bundle_digest=bundle_digest())


def open_session(path: str | Path, *, lock: bool, lock_wait: float = 0.0) -> Session:
    """Load and validate the manifest, build backends; take the project lock if asked."""
    from sand.backends.factory import make_backends

    loaded = load_manifest(path)
    desired = desired_from(loaded)
    session = Session(loaded, desired)
    if lock:
        session.lock = ProjectLock(project_dir(desired.project) / "apply.lock")
        session.lock.acquire(wait=lock_wait)
    try:
        session.backends = make_backends(loaded.manifest, loaded.directory)
    except BaseException:
        if session.lock:
            session.lock.release()
        raise
    return session
