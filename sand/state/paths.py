"""Where sand keeps host state: XDG state dir (platformdirs), overridable for tests/CI.

Both directories are sand's own and always 0700: made so whatever the umask,
and tightened when found looser (an older sand, a restore, a hand-made dir).
"""

from __future__ import annotations

import os
from pathlib import Path

from sand.manifest.names import IDENTIFIER
from sand.state.private import ensure_private_dir


def state_root() -> Path:
    override = os.environ.get("SAND_STATE_DIR")
    if override:
        root = Path(override)
    else:
        # here, not at the top: importing it loads platformdirs
        from platformdirs import user_state_dir

        root = Path(user_state_dir("sand", appauthor=False))
    return ensure_private_dir(root)


def project_dir(project: str) -> Path:
    # The project id is validated by the manifest; re-check because it names a directory.
    if not IDENTIFIER.match(project):
        raise ValueError(f"invalid project id {project!r}")
    root = state_root()
    return ensure_private_dir(root / "projects" / project, own_from=root)
