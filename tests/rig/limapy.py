"""A Python the rig's Lima user can run sand with.

The suite's interpreter and its site-packages may live where that user cannot read
(pyenv under ``/root``, mode 0700), so the real-Lima tier runs sand with the system
``python3`` and sand's runtime dependencies installed once (``pip install --target``,
the versions this suite runs with) into a world-readable directory of the rig cache.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

from tests.rig._util import RigError, cache_dir, file_lock, log, remove_tree, run

SYSTEM_PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parents[2]


def _requirements() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"])


def _pins() -> list[str]:
    """``name==version`` of everything this interpreter holds, so the copy matches it."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format=freeze"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    return [line for line in out.splitlines() if "==" in line]


def _system_version() -> str:
    probe = [SYSTEM_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"]
    try:
        return subprocess.run(probe, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as exc:
        raise RigError(f"{SYSTEM_PYTHON} is not usable: {exc}") from exc


def site_dir() -> Path:
    """The directory to put on PYTHONPATH (after the checkout) for SYSTEM_PYTHON."""
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if _system_version() != ours:
        raise RigError(f"{SYSTEM_PYTHON} is not Python {ours}, which the wheels here are for")
    pins = _pins()
    ident = {"requires": _requirements(), "pins": pins, "python": ours}
    key = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]
    dest = cache_dir() / f"lima-pydeps-{key}"
    if (dest / ".done").is_file():
        return dest
    with file_lock(cache_dir() / "lima-pydeps.lock"):
        if (dest / ".done").is_file():
            return dest
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
        try:
            constraints = tmp / "constraints.txt"
            constraints.write_text("\n".join(pins) + "\n")
            log(f"installing sand's dependencies for the Lima user into {dest}")
            run([sys.executable, "-m", "pip", "install", "-q", "--no-compile",
                 "--disable-pip-version-check", "--target", tmp / "site",
                 "--constraint", constraints, *_requirements()], timeout=900)  # fmt: skip
            run(["chmod", "-R", "a+rX", tmp])
            (tmp / "site" / ".done").write_text("")
            remove_tree(dest)
            (tmp / "site").rename(dest)
        finally:
            remove_tree(tmp)
    return dest


def sand_for_user() -> dict[str, str]:
    """What the Lima user's environment needs for a working ``sand`` on its PATH, as a
    person driving the real Lima by hand types it (``tests.rig.lima run -- sand ...``):
    sand's code copied where that user reads it (a checkout under /root is 0700), a
    ``sand`` launcher running it with the system Python, and its dependencies."""
    site = site_dir()
    root = cache_dir() / "lima-sand"
    code, bin_dir = root / "py", root / "bin"
    with file_lock(cache_dir() / "lima-sand.lock"):
        remove_tree(code)  # the checkout as it is now, every time
        shutil.copytree(REPO / "sand", code / "sand", ignore=shutil.ignore_patterns("__pycache__"))
        bin_dir.mkdir(parents=True, exist_ok=True)
        launcher = bin_dir / "sand"
        launcher.write_text(f'#!/bin/sh\nexec {SYSTEM_PYTHON} -m sand "$@"\n')
        run(["chmod", "-R", "a+rX", root])
        launcher.chmod(0o755)
    return {"PATH_PREFIX": str(bin_dir), "PYTHONPATH": f"{code}:{site}"}


def main() -> int:
    """``python -m tests.rig.limapy``: install the copy if missing, print its directory."""
    try:
        print(site_dir())
    except (RigError, subprocess.CalledProcessError) as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
