"""``sand cp``: the one way files cross between host and guest, both explicit.

Placement is ``cp -r``'s, the same every time, in both directions: when the
destination is an existing directory the copy goes *inside* it under the
source's name; otherwise the copy is *created at* the destination (whose
parent must exist). ``sand cp -r src vm:~/dst`` twice therefore gives
``~/dst`` and then ``~/dst/src``, exactly like ``cp -r``.

Downloads never trust the guest: a guest symlink is never followed (a
symlinked source is refused, symlinks inside a tree are skipped and listed),
nor are device files or FIFOs copied; every name the guest lists must be one
plain path component; and nothing on the host is replaced -- the target must
not exist, every directory is created by sand and every file is opened
relative to its directory's descriptor with ``O_EXCL | O_NOFOLLOW``, so a
download can only add new files under the target it named. Uploads recreate
symlinks as symlinks, so host files outside the source never travel.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import posixpath
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sand.audit.trail import record
from sand.errors import ErrorLayer, SandError
from sand.guest.fs import Entry, GuestFS, entry_from_mode
from sand.terminal import one_line

MAX_DEPTH = 64
Report = Callable[[str], None]


class CopyRefused(SandError):
    layer = ErrorLayer.CP


@dataclass
class Summary:
    files: int = 0
    dirs: int = 0
    bytes: int = 0
    skipped: int = 0
    target: str = ""
    vm: str = ""  # the guest's side, for the audit trail

    def moved(self, direction: str, host: str, guest: str, size: int, sha256: str) -> None:
        """One file crossed: counted, and written to the host's audit trail."""
        self.files += 1
        self.bytes += size
        where = {"direction": direction, "host_path": host, "guest_path": guest}
        record("cp.file", vm=self.vm, **where, bytes=size, sha256=sha256)

    def describe(self, verb: str) -> str:
        text = f"{verb} {self.files} files, {self.dirs} directories, {self.bytes} bytes"
        return text + (f"; skipped {self.skipped}" if self.skipped else "") + f" -> {self.target}"


def guest_path(path: str) -> str:
    """A guest path for SFTP, whose relative paths start at the user's home."""
    if "\0" in path or not path:
        raise CopyRefused("the guest path is empty or holds a NUL")
    if path == "~":
        return "."
    if path.startswith("~/"):
        return path[2:] or "."
    if path.startswith("~"):
        raise CopyRefused(f"{path!r}: only ~ and ~/... are understood, not ~user")
    return path


def _component(name: str) -> str:
    if name in ("", ".", "..") or "/" in name or "\0" in name:
        raise CopyRefused(f"the guest listed a name that is not a file name: {one_line(name)!r}")
    return name


async def download(
    fs: GuestFS, src: str, dst: str, *, recursive: bool, report: Report, vm: str = ""
) -> Summary:
    rsrc = guest_path(src)
    entry = await fs.lstat(rsrc)
    if entry is None:
        raise CopyRefused(f"{src}: no such file or directory in the guest")
    if entry.kind == "symlink":
        raise CopyRefused(f"{src} is a symlink in the guest; sand cp does not follow guest links")
    if entry.kind == "other":
        raise CopyRefused(f"{src} is not a regular file or directory")
    if entry.kind == "dir" and not recursive:
        raise CopyRefused(f"{src} is a directory; use -r")
    name = posixpath.basename(rsrc.rstrip("/"))
    if name in ("", ".", ".."):
        name = posixpath.basename((await fs.realpath(rsrc)).rstrip("/"))
    if not name or not name.isprintable():
        raise CopyRefused(f"{src} has no usable name; give the host destination a name")
    _component(name)
    local = Path(dst)
    if local.is_dir():
        target = local / name
    elif dst.endswith("/"):
        raise CopyRefused(f"{dst} is not a directory")
    else:
        target = local
    if os.path.lexists(target):
        raise CopyRefused(f"{target} exists; sand cp never replaces a host file or directory")
    parent = target.parent
    if not parent.is_dir():
        raise CopyRefused(f"{parent} is not a directory")
    summary = Summary(target=str(target), vm=vm)
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if entry.kind == "file":
            await _fetch_file(fs, rsrc, parent_fd, str(target), entry, summary)
        else:
            os.mkdir(target.name, 0o755, dir_fd=parent_fd)
            summary.dirs += 1
            fd = os.open(
                target.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd
            )
            try:
                await _fetch_tree(fs, rsrc, fd, target.name, summary, report, 0)
            finally:
                os.close(fd)
    finally:
        os.close(parent_fd)
    return summary


async def _fetch_tree(
    fs: GuestFS, rdir: str, dir_fd: int, shown: str, summary: Summary, report: Report, depth: int
) -> None:
    if depth >= MAX_DEPTH:
        raise CopyRefused(f"{shown} is nested deeper than {MAX_DEPTH} directories")
    for name, entry in sorted(await fs.listdir(rdir)):
        _component(name)
        here = f"{shown}/{one_line(name)}"
        if not name.isprintable():
            report(f"skipped {here}: its name has control or invisible characters")
            summary.skipped += 1
        elif entry.kind == "dir":
            os.mkdir(name, 0o755, dir_fd=dir_fd)
            summary.dirs += 1
            fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
            try:
                await _fetch_tree(
                    fs, posixpath.join(rdir, name), fd, here, summary, report, depth + 1
                )
            finally:
                os.close(fd)
        elif entry.kind == "file":
            host = os.path.join(os.path.dirname(summary.target), shown, name)
            await _fetch_file(fs, posixpath.join(rdir, name), dir_fd, host, entry, summary)
        else:
            what = (
                "a symlink (guest links are never followed)"
                if entry.kind == "symlink"
                else ("not a regular file")
            )
            report(f"skipped {here}: {what}")
            summary.skipped += 1


async def _fetch_file(
    fs: GuestFS, rpath: str, dir_fd: int, host: str, entry: Entry, summary: Summary
) -> None:
    """``rpath`` of the guest to ``host`` (a new file, its name in ``dir_fd``)."""
    name = os.path.basename(host)
    mode = 0o755 if entry.mode & 0o111 else 0o644
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode, dir_fd=dir_fd)
    digest = hashlib.sha256()
    size = 0
    try:
        async with fs.read(rpath) as chunks:
            async for chunk in chunks:
                os.write(fd, chunk)
                digest.update(chunk)
                size += len(chunk)
    except BaseException:
        os.close(fd)
        fd = -1
        with contextlib.suppress(OSError):
            os.unlink(name, dir_fd=dir_fd)
        raise
    finally:
        if fd >= 0:
            os.close(fd)
    summary.moved("download", host, rpath, size, digest.hexdigest())


async def upload(
    fs: GuestFS, src: Path, dst: str, *, recursive: bool, report: Report, vm: str = ""
) -> Summary:
    try:
        st = os.stat(src)  # the path a person named on their own host: followed
    except OSError as exc:
        raise CopyRefused(f"{src}: {exc.strerror}") from None
    entry = entry_from_mode(st.st_mode, st.st_size)
    if entry.kind == "dir" and not recursive:
        raise CopyRefused(f"{src} is a directory; use -r")
    if entry.kind == "other":
        raise CopyRefused(f"{src} is not a regular file or directory")
    name = src.name if src.name not in ("", ".", "..") else src.resolve().name
    rdst = guest_path(dst)
    existing = await fs.stat(rdst)
    if existing is not None and existing.kind == "dir":
        target = posixpath.join(rdst, name)
    elif dst.endswith("/"):
        raise CopyRefused(f"{dst} is not a directory in the guest")
    else:
        target = rdst
    summary = Summary(target=target, vm=vm)
    if entry.kind == "file":
        await _send_file(fs, str(src), target, entry, summary, follow=True)
    else:
        await _send_tree(fs, src, target, summary, report, 0)
    return summary


async def _send_tree(
    fs: GuestFS, src: Path, target: str, summary: Summary, report: Report, depth: int
) -> None:
    if depth >= MAX_DEPTH:
        raise CopyRefused(f"{src} is nested deeper than {MAX_DEPTH} directories")
    existing = await fs.lstat(target)
    if existing is None:
        await fs.mkdir(target)
    elif existing.kind != "dir":
        raise CopyRefused(f"{target} exists in the guest and is not a directory")
    summary.dirs += 1
    with os.scandir(src) as it:
        items = sorted(it, key=lambda e: e.name)
    for item in items:
        rpath = posixpath.join(target, item.name)
        st = item.stat(follow_symlinks=False)
        entry = entry_from_mode(st.st_mode, st.st_size)
        if entry.kind == "dir":
            await _send_tree(fs, Path(item.path), rpath, summary, report, depth + 1)
        elif entry.kind == "file":
            await _send_file(fs, item.path, rpath, entry, summary, follow=False)
        elif entry.kind == "symlink":
            if await fs.lstat(rpath) is not None:
                report(f"skipped symlink {one_line(item.path)}: {rpath} exists in the guest")
                summary.skipped += 1
            else:
                await fs.symlink(os.readlink(item.path), rpath)
        else:
            report(f"skipped {one_line(item.path)}: not a regular file")
            summary.skipped += 1


async def _send_file(
    fs: GuestFS, path: str, target: str, entry: Entry, summary: Summary, *, follow: bool
) -> None:
    flags = os.O_RDONLY | (0 if follow else os.O_NOFOLLOW)
    fd = os.open(path, flags)
    try:
        await fs.write(target, fd, 0o755 if entry.mode & 0o111 else 0o644)
        size, sha256 = _digest_of(fd)  # the bytes as sand read them, after the send
    finally:
        os.close(fd)
    summary.moved("upload", os.path.abspath(path), target, size, sha256)


def _digest_of(fd: int) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    while chunk := os.pread(fd, 1 << 20, size):
        digest.update(chunk)
        size += len(chunk)
    return size, digest.hexdigest()
