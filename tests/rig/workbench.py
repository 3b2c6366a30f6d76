"""The workbench tree and the apt mirror: what stands in for a Debian mirror.

sand provisions every guest as a workbench: the packages step's
``BASE_PACKAGES`` (git, tmux, build-essential, ...), the toolchain step's
Node.js, npm and gh (Debian's packages when the vendors' repositories are out
of reach, as they always are here), and Docker (``docker.io``) for a VM that
opts in. Rig guests have no route to any mirror, so two artifacts, built once
from the cached debootstrap rootfs and cached beside it, stand in for one:

* the **workbench tree**: the rootfs with all of that but Docker installed --
  what a prepared image (a template, a Lima base) looks like. Netns guests
  and the qemu image run on it, so provisioning them finds the workbench in
  place and installs nothing, as it would on such an image.
* the **apt mirror**: every ``.deb`` those packages (Docker's included) need
  on top of the bare rootfs, with a ``Packages`` index and ``Release`` file.
  :class:`AptMirror` serves it over HTTP on the test bridge; a guest on the
  *bare* rootfs pointed at it gets its workbench from sand's own apt-get
  runs, which is how a test proves what sand installs.

Both come from one chroot session over the host's own Debian mirror (the
only network the build machine reaches): the install fills the tree and
leaves every .deb it fetched, and ``--download-only docker.io`` adds Docker's.

CLI::

    python -m tests.rig.workbench build    # build if missing, print the path
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType

from sand.provision.steps import BASE_PACKAGES
from tests.rig._util import (
    RigError,
    cache_dir,
    chroot_sh,
    file_lock,
    log,
    remove_tree,
    run,
)
from tests.rig.rootfs import RootfsRecipe, ensure_rootfs

# The toolchain step's Debian fallback (NodeSource and cli.github.com are out of reach).
TOOLCHAIN_PACKAGES = ("gh", "nodejs", "npm")
# In the mirror only: a VM gets Docker when it opts in, so the tree has none.
MIRROR_ONLY_PACKAGES = ("docker.io",)
# Bump when the build below changes.
RECIPE_VERSION = 1
STAMP_NAME = "stamp.json"


def tree_packages() -> tuple[str, ...]:
    return tuple(sorted({*BASE_PACKAGES, *TOOLCHAIN_PACKAGES}))


def _key() -> str:
    ident = {
        "rootfs": RootfsRecipe().key(),
        "tree": tree_packages(),
        "mirror": sorted(MIRROR_ONLY_PACKAGES),
        "version": RECIPE_VERSION,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class Workbench:
    tree: Path  # a root filesystem: lowerdir for netns guests, the qemu image's source
    mirror: Path  # a flat apt repository: Packages, Release, *.deb


def workbench_dir() -> Path:
    # Not "rootfs-*": rootfs.py prunes every tree of that name but its own.
    return cache_dir() / f"workbench-bookworm-{_key()}"


def _is_built(path: Path) -> bool:
    try:
        return bool(json.loads((path / STAMP_NAME).read_text()).get("key") == _key())
    except (OSError, ValueError):
        return False


def ensure_workbench() -> Workbench:
    """The cached tree and mirror, built under a lock on first use (a few minutes)."""
    dest = workbench_dir()
    found = Workbench(dest / "root", dest / "apt")
    if _is_built(dest):
        return found
    rootfs = ensure_rootfs()
    with file_lock(cache_dir() / "workbench.lock"):
        if _is_built(dest):
            return found
        for stale in dest.parent.glob(f".{dest.name}.tmp-*"):
            remove_tree(stale)
        remove_tree(dest)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        try:
            _build(rootfs, tmp)
            os.chmod(tmp, 0o755)
            os.rename(tmp, dest)
        except BaseException:
            remove_tree(tmp)
            raise
        for old in dest.parent.glob("workbench-bookworm-*"):
            if old != dest and f"lowerdir={old}" not in Path("/proc/self/mountinfo").read_text():
                remove_tree(old)
    return found


def _build(rootfs: Path, out: Path) -> None:
    t0 = time.monotonic()
    tree, mirror = out / "root", out / "apt"
    mirror.mkdir()
    run(["cp", "-a", "--reflink=auto", rootfs, tree], timeout=900)
    resolv = tree / "etc/resolv.conf"
    resolv.unlink(missing_ok=True)
    shutil.copyfile("/etc/resolv.conf", resolv)  # apt in the chroot only; guests get none
    packages = " ".join(tree_packages())
    extra = " ".join(MIRROR_ONLY_PACKAGES)
    log(f"installing the workbench into {tree}: {packages} (+ {extra} for the mirror)")
    archives = tree / "var/cache/apt/archives"
    chroot_sh(
        tree,
        # policy-rc.d: nothing starts services inside the build chroot.
        "printf '#!/bin/sh\\nexit 101\\n' > /usr/sbin/policy-rc.d;"
        " chmod 755 /usr/sbin/policy-rc.d;"
        " apt-get update -q;"
        f" apt-get install -y -q --no-install-recommends {packages};"
        f" apt-get install -y -q --no-install-recommends --download-only {extra};"
        " rm -f /usr/sbin/policy-rc.d",
    )
    for deb in sorted(archives.glob("*.deb")):
        shutil.move(deb, mirror / deb.name)
    # Like the rootfs: no package lists, no resolver (guests have no route out).
    chroot_sh(tree, "apt-get clean; rm -rf /var/lib/apt/lists/*")
    resolv.write_text("# sand rig guests have no DNS\n")
    count = write_index(mirror)
    stamp = {"key": _key(), "tree": tree_packages(), "mirror_debs": count}
    (out / STAMP_NAME).write_text(json.dumps(stamp, indent=2) + "\n")
    log(f"workbench built in {time.monotonic() - t0:.0f}s: {count} .debs in {mirror}")


def write_index(mirror: Path) -> int:
    """``Packages`` and ``Release`` for a flat repository (``deb [trusted=yes] URL ./``)."""
    stanzas = []
    debs = sorted(mirror.glob("*.deb"))
    for deb in debs:
        control = run(["dpkg-deb", "-f", deb]).stdout.decode().rstrip("\n")
        data = deb.read_bytes()
        stanzas.append(
            f"{control}\nFilename: ./{deb.name}\nSize: {len(data)}\n"
            f"SHA256: {hashlib.sha256(data).hexdigest()}\n"
        )
    index = "\n".join(stanzas).encode()
    (mirror / "Packages").write_bytes(index)
    (mirror / "Release").write_text(
        "Origin: sand-rig\nLabel: sand-rig\nSuite: stable\nCodename: sand-rig\n"
        f"SHA256:\n {hashlib.sha256(index).hexdigest()} {len(index)} Packages\n"
    )
    return len(debs)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        server = self.server
        assert isinstance(server, _MirrorServer)
        with server.log_lock:
            server.request_log.append(self.path)


class _MirrorServer(ThreadingHTTPServer):
    daemon_threads = True
    request_log: list[str]
    log_lock: threading.Lock


class AptMirror:
    """The workbench mirror over HTTP on the test bridge (every netns guest reaches it)."""

    def __init__(self, mirror: Path) -> None:
        self.mirror = mirror
        self._server: _MirrorServer | None = None

    def __enter__(self) -> AptMirror:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> AptMirror:
        from tests.rig.guest import ensure_bridge

        handler = partial(_Quiet, directory=os.fspath(self.mirror))
        server = _MirrorServer((ensure_bridge(), 0), handler)
        server.request_log, server.log_lock = [], threading.Lock()
        threading.Thread(target=server.serve_forever, name="sand-rig-apt", daemon=True).start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RigError("apt mirror not started")
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/"

    @property
    def requests(self) -> list[str]:
        """Every request line the mirror answered, e.g. 'GET /tmux_3.3a-3_amd64.deb HTTP/1.1'."""
        assert self._server is not None
        with self._server.log_lock:
            return list(self._server.request_log)

    def sources_list(self) -> str:
        """The guest's whole /etc/apt/sources.list: this mirror, and nothing else."""
        return f"deb [trusted=yes] {self.url} ./\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.rig.workbench")
    parser.add_argument("command", choices=["build"])
    parser.parse_args(argv)
    print(ensure_workbench().tree.parent)
    return 0


if __name__ == "__main__":
    sys.exit(main())
