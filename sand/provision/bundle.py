"""The provisioning bundle: the fixed shell scripts a guest runs, and their digest.

The scripts in ``bundle/`` are shipped as package data and copied whole into
each guest (``/usr/local/lib/sand/bundle``); the host never composes guest
shell code from manifest data, it only runs these files with validated names
in argv and everything else on stdin. The digest is part of every VM's guest
fingerprint, so editing a script reprovisions the fleet in place.

Only the standard library is imported here: ``bundle_digest()`` runs at plan
time, which must stay cheap and must not need asyncssh.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import tarfile

BUNDLE_DIR = Path(__file__).with_name("bundle")
GUEST_DIR = "/usr/local/lib/sand/bundle"  # lib.sh's SAND_LIB says the same
_SKIP = {"__pycache__", ".DS_Store"}


@dataclass(frozen=True)
class Bundle:
    root: Path = BUNDLE_DIR

    @cached_property
    def files(self) -> tuple[tuple[str, bytes, bool], ...]:
        """(relative path, content, executable) for every file, sorted by path."""
        out: list[tuple[str, bytes, bool]] = []
        for path in sorted(self.root.rglob("*")):
            rel = path.relative_to(self.root)
            if path.is_dir() or _SKIP.intersection(rel.parts) or path.name.endswith(".pyc"):
                continue
            out.append((rel.as_posix(), path.read_bytes(), bool(path.stat().st_mode & 0o100)))
        if not out:
            raise FileNotFoundError(f"no provisioning bundle in {self.root}")
        return tuple(out)

    @cached_property
    def digest(self) -> str:
        h = hashlib.sha256(b"sand-bundle-v1\0")
        for rel, data, executable in self.files:
            h.update(f"{rel}\0{int(executable)}\0{len(data)}\0".encode())
            h.update(data)
        return h.hexdigest()

    def files_digest(self, paths: tuple[str, ...]) -> str:
        """A digest of the named files only (a name ending in '/' takes a directory's
        files): what a step's digest covers, so editing one script re-runs only the
        steps that run it."""
        h = hashlib.sha256(b"sand-bundle-files-v1\0")
        for rel, data, executable in self.files:
            if any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in paths):
                h.update(f"{rel}\0{int(executable)}\0{len(data)}\0".encode())
                h.update(data)
        return h.hexdigest()

    @cached_property
    def tar(self) -> bytes:
        """An uncompressed tar of the bundle plus a DIGEST file, byte-for-byte stable."""
        import tarfile  # here, not at the top: a plan needs the digest only

        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            entries = [*self.files, ("DIGEST", self.digest.encode() + b"\n", False)]
            dirs = sorted({str(Path(rel).parent) for rel, _, _ in entries} - {"."})
            for d in dirs:
                tar.addfile(_info(d, 0, tarfile.DIRTYPE, 0o755))
            for rel, data, executable in entries:
                info = _info(rel, len(data), tarfile.REGTYPE, 0o755 if executable else 0o644)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()


def _info(name: str, size: int, kind: bytes, mode: int) -> tarfile.TarInfo:
    import tarfile

    info = tarfile.TarInfo(name)
    info.size, info.type, info.mode = size, kind, mode
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    return info


_default: Bundle | None = None


def default_bundle() -> Bundle:
    global _default
    if _default is None:
        _default = Bundle()
    return _default


def bundle_digest(root: Path | None = None) -> str:
    """Content hash of the provisioning bundle (hex sha256)."""
    return (Bundle(root) if root is not None else default_bundle()).digest


# The scripts a golden base runs (its machine steps and their generalization): a change
# to one of them rebuilds the bases; a change to any other script only re-runs its steps.
MACHINE_SCRIPTS = (
    "lib.sh",
    "user.sh",
    "packages.sh",
    "toolchain.sh",
    "agents.sh",
    "memory.sh",
    "image-step.sh",
    "generalize.sh",
)


def machine_digest(root: Path | None = None) -> str:
    """The digest of :data:`MACHINE_SCRIPTS`: part of every golden base's fingerprint."""
    bundle = Bundle(root) if root is not None else default_bundle()
    return bundle.files_digest(MACHINE_SCRIPTS)
