"""Where sand keeps host state: XDG state dir (platformdirs), overridable for tests/CI."""

from __future__ import annotations

import os
from pathlib import Path

from sand.manifest.names import IDENTIFIER


def state_root() -> Path:
    override = os.environ.get("SAND_STATE_DIR")
    if override:
        root = Path(override)
    else:
        from platformdirs import user_state_dir

        root = Path(user_state_dir("sand", appauthor=False))
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    return root


def project_dir(project: str) -> Path:
    # The project id is validated by the manifest; re-check because it names a directory.
    if not IDENTIFIER.match(project):
        raise ValueError(f"invalid project id {project!r}")
    path = state_root() / "projects" / project
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path
