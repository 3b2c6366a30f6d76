"""Small helpers shared by the rig modules: running commands, locks, paths."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

CACHE_ENV = "SAND_RIG_CACHE"
DEFAULT_CACHE = Path("/var/cache/sand-rig")

# Per-guest state (overlay upper dirs, keys, ownership records) lives under the
# cache dir rather than /tmp so overlayfs always has a real filesystem under it
# and so `cleanup_stale()` from a later run can find what a crashed run left.
STATE_SUBDIR = "guests"


class RigError(RuntimeError):
    """A rig step failed; the message carries the command and its output."""


def cache_dir() -> Path:
    path = Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)
    path.mkdir(parents=True, exist_ok=True)
    return path


def state_dir() -> Path:
    path = cache_dir() / STATE_SUBDIR
    path.mkdir(parents=True, exist_ok=True)
    return path


def log(msg: str) -> None:
    # stderr so pytest's -s / CI logs show progress of long builds.
    print(f"[sand-rig] {msg}", file=sys.stderr, flush=True)


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    check: bool = True,
    input: bytes | None = None,
    timeout: float | None = 600,
    env: dict[str, str] | None = None,
    capture: bool = True,
    cwd: os.PathLike[str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run a command, raising RigError with its output when it fails."""
    args = [os.fspath(a) for a in argv]
    proc = subprocess.run(
        args,
        input=input,
        stdout=subprocess.PIPE if capture else None,
        stderr=subprocess.PIPE if capture else None,
        timeout=timeout,
        env=env,
        cwd=cwd,
        check=False,
    )
    if check and proc.returncode != 0:
        out = (proc.stdout or b"").decode(errors="replace")[-4000:]
        err = (proc.stderr or b"").decode(errors="replace")[-4000:]
        raise RigError(
            f"command failed (exit {proc.returncode}): {' '.join(args)}\n"
            f"--- stdout ---\n{out}\n--- stderr ---\n{err}"
        )
    return proc


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive flock: serialises builders and address allocation across
    processes (concurrent pytest runs, xdist workers, CI setup + tests)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def missing_tools(tools: Sequence[str]) -> list[str]:
    return [t for t in tools if shutil.which(t) is None]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_file(
    path: Path, data: str | bytes, mode: int = 0o644, uid: int = 0, gid: int = 0
) -> None:
    """Write a file inside a guest tree with exact ownership and mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else data
    # Remove first: the path may be a symlink from the lower rootfs layer and
    # writing through it could land outside the guest tree.
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        os.write(fd, raw)
        os.fchown(fd, uid, gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below `path` in our mount namespace."""
    prefix = os.fspath(path)
    found: list[str] = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = line.split()[4].replace("\\040", " ")
            if mnt == prefix or mnt.startswith(prefix + "/"):
                found.append(mnt)
    return found


def remove_tree(path: Path) -> bool:
    """rmtree that never crosses a mount point.

    A killed debootstrap leaves /proc and /sys mounted in its target, and a
    guest dir may still hold its overlay; rmtree across those would try to
    delete through into live filesystems.  Unmount deepest first (lazily if
    busy); if anything is still mounted, leave the tree and say so.
    """
    for _ in range(3):
        mounts = sorted(mounts_under(path), key=len, reverse=True)
        if not mounts:
            break
        for m in mounts:
            if run(["umount", m], check=False).returncode != 0:
                run(["umount", "-l", m], check=False)
    if mounts_under(path):
        log(f"WARNING: {path} still has mounts; leaving it in place")
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


def chroot_sh(root: Path, script: str, timeout: float = 1800) -> None:
    """Run a shell script chrooted in `root` with /proc, /sys, /dev mounted in
    a private mount namespace (nothing to unmount if we die midway)."""
    wrapper = (
        'set -eu; R="$1"; shift\n'
        'mount -t proc proc "$R/proc"\n'
        'mount -t sysfs sysfs "$R/sys"\n'
        'mount --rbind /dev "$R/dev"\n'
        'exec chroot "$R" /bin/sh -euc "$0"\n'
    )
    run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", wrapper, script, root],
        timeout=timeout,
        env={
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "LANG": "C.UTF-8",
            "DEBIAN_FRONTEND": "noninteractive",
        },
    )
