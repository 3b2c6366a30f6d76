"""Build (once per pinned version) the real Lima the rig tests sand against.

Lima is not vendored: its Go module is downloaded from the module proxy
(``go mod download``), built in the module's own directory so its ``go.mod``
(and any ``replace`` in it) holds, and laid out as a Lima prefix::

    <cache>/lima/<version>/bin/limactl
    <cache>/lima/<version>/share/lima/lima-guestagent.Linux-x86_64

The version is stamped as Lima's Makefile does (``-X .../pkg/version.Version``),
so ``limactl --version`` -- which sand reads -- answers the pinned release. A
prefix is complete once its stamp file exists; a different pin builds a new
prefix beside it.

CLI (used by .ci/rig-setup.sh)::

    python -m tests.rig.limabuild build   # build if missing, print the prefix
    python -m tests.rig.limabuild path    # print the prefix, exit 1 if not built
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.rig._util import RigError, cache_dir, file_lock, log, missing_tools, run

MODULE = "github.com/lima-vm/lima/v2"
# The oldest Lima sand supports; the one the rig builds.
VERSION = "v2.2.0"
STAMP_NAME = ".sand-rig-lima.json"
# Lima's Makefile builds limactl with cgo (the hostagent's DNS uses the
# system resolver) and the guest agent as a static Linux binary.
_GUESTAGENT = "lima-guestagent.Linux-x86_64"


def prefix(version: str = VERSION) -> Path:
    return cache_dir() / "lima" / version.removeprefix("v")


def built(version: str = VERSION) -> Path | None:
    root = prefix(version)
    return root if (root / STAMP_NAME).is_file() else None


def limactl(version: str = VERSION) -> Path | None:
    root = built(version)
    return root / "bin" / "limactl" if root else None


def _module_dir(version: str, env: dict[str, str]) -> Path:
    out = run(["go", "mod", "download", "-json", f"{MODULE}@{version}"], env=env, timeout=900)
    info = json.loads(out.stdout)
    if info.get("Error"):
        raise RigError(f"go mod download {MODULE}@{version}: {info['Error']}")
    return Path(info["Dir"])


def go_build(source: Path, ldflags: str, out: Path, package: str, env: dict[str, str]) -> None:
    # In the module's own directory: its go.mod (and any replace in it) holds.
    run(["go", "build", "-ldflags", ldflags, "-o", out, package], env=env, timeout=3600, cwd=source)


def build(version: str = VERSION) -> Path:
    done = built(version)
    if done:
        return done
    if missing_tools(["go"]):
        raise RigError("building Lima needs Go (>= the version in Lima's go.mod) on PATH")
    root = prefix(version)
    with file_lock(root.parent / f".{root.name}.lock"):
        if built(version):
            return root
        started = time.monotonic()
        env = {**os.environ, "GOFLAGS": "-mod=mod"}
        source = _module_dir(version, env)
        ldflags = f"-s -w -X {MODULE}/pkg/version.Version={version}"
        staging = Path(tempfile.mkdtemp(prefix=f".{root.name}.", dir=root.parent))
        try:
            (staging / "bin").mkdir()
            (staging / "share" / "lima").mkdir(parents=True)
            log(f"building limactl {version} in {source}")
            go_build(
                source,
                ldflags,
                staging / "bin" / "limactl",
                "./cmd/limactl",
                {**env, "CGO_ENABLED": "1"},
            )
            log(f"building {_GUESTAGENT}")
            guest_env = {**env, "CGO_ENABLED": "0", "GOOS": "linux", "GOARCH": "amd64"}
            go_build(
                source,
                ldflags,
                staging / "share" / "lima" / _GUESTAGENT,
                "./cmd/lima-guestagent",
                guest_env,
            )
            # Templates: `limactl create template:default` and friends read them.
            shutil.copytree(source / "templates", staging / "share" / "lima" / "templates")
            templates = staging / "share" / "lima" / "templates"
            for path in [templates, *templates.rglob("*")]:  # the module cache is read-only
                path.chmod(0o755 if path.is_dir() else 0o644)
            stamp = {
                "module": MODULE,
                "version": version,
                "seconds": round(time.monotonic() - started),
            }
            (staging / STAMP_NAME).write_text(json.dumps(stamp) + "\n")
            staging.chmod(0o755)
            if root.exists():
                shutil.rmtree(root)  # an unstamped (interrupted) build
            staging.rename(root)
        finally:
            if staging.exists():
                shutil.rmtree(staging)
        log(f"Lima {version} built in {time.monotonic() - started:.0f}s: {root}")
    return root


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rig.limabuild")
    parser.add_argument("command", choices=["build", "path"])
    args = parser.parse_args(argv)
    if args.command == "path":
        root = built()
        if root is None:
            print(
                f"Lima {VERSION} is not built; run: python -m tests.rig.limabuild build",
                file=sys.stderr,
            )
            return 1
        print(root)
        return 0
    try:
        print(build())
    except RigError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
