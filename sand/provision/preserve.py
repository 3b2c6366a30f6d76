"""``preserve:``: guest paths carried from an old guest into its replacement, verified.

Upstream sand's reset-with-preserve, made part of every replace and reprovision:
the listed paths (``~/src``, ``~/.claude``, ...) are archived by ``tar`` in the old
guest and streamed over SSH into a file in sand's state dir (0600, in a 0700 dir);
the file is streamed into the new guest, where each path is first removed (so the
restore is exact: a file the agent deleted does not come back from a fresh clone)
and then extracted as the VM's user. The host reads the archive it holds to list
every entry with its SHA-256, and the new guest lists what it now has under the
same paths; they must be equal, or the replace stops before the old VM is touched.

This is a deliberate, opt-in exception to "nothing leaves the VM" (the security
model): only the paths the manifest names, only into sand's private state dir,
and the file is removed once the restore is verified.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sand.errors import ErrorLayer, SandError
from sand.guest.endpoint import GuestEndpoint
from sand.guest.runner import RunResult, SshRunner
from sand.guest.ssh import connect, where
from sand.state.private import ensure_private_dir, open_private

CHUNK = 1 << 16
TIMEOUT = 3600.0  # listing a big ~/src; the archive streams themselves have no clock
# Never carried: the new guest's own login key must stay (it is how sand gets in).
EXCLUDED = (".ssh/authorized_keys",)

# stdin: NUL-terminated paths relative to $HOME ("." for the whole home). Writes a tar
# of those that exist to stdout. tar's exit 1 ("file changed as we read it": an agent
# is still writing) is not a failure: what was read is what is verified.
ARCHIVE_SCRIPT = r"""
set -u
cd "$HOME" || exit 2
paths=()
while IFS= read -r -d '' rel; do
	[ -e "$rel" ] || [ -L "$rel" ] || continue
	paths+=("$rel")
done
[ "${#paths[@]}" -gt 0 ] || exit 0
tar --create --file=- --format=gnu --exclude=./.ssh/authorized_keys \
	--exclude=.ssh/authorized_keys -- "${paths[@]}"
rc=$?
[ "$rc" -le 1 ] || exit "$rc"
exit 0
"""

# $@: paths relative to $HOME; stdin: the tar. Each path but the home itself is removed
# first, then the archive is extracted as this user.
RESTORE_SCRIPT = r"""
set -eu
cd "$HOME"
for rel in "$@"; do
	[ "$rel" = . ] && continue
	rm -rf -- "$rel"
done
tar --extract --file=- --no-same-owner
"""

# stdin: the tar. Puts back only what is missing (a reprovision removed it); files that
# exist are left as they are.
RESTORE_MISSING_SCRIPT = r"""
set -eu
cd "$HOME"
tar --extract --file=- --no-same-owner --skip-old-files
"""

# $@: paths relative to $HOME. Prints NUL-separated records "KIND\0VALUE\0PATH\0" for
# every entry under them: f = a file's sha256, l = a link's target, d = a directory.
DIGEST_SCRIPT = r"""
set -eu
cd "$HOME"
for rel in "$@"; do
	[ -e "$rel" ] || [ -L "$rel" ] || continue
	find "$rel" -path ./.ssh/authorized_keys -prune -o -path .ssh/authorized_keys -prune -o \
		-print0 | while IFS= read -r -d '' p; do
		if [ -L "$p" ]; then printf 'l\0%s\0%s\0' "$(readlink -- "$p")" "$p"
		elif [ -d "$p" ]; then printf 'd\0\0%s\0' "$p"
		elif [ -f "$p" ]; then printf 'f\0%s\0%s\0' "$(sha256sum -- "$p" | cut -d' ' -f1)" "$p"
		fi
	done
done
"""


class PreserveError(SandError):
    """Preserved paths could not be carried over, or arrived different."""

    layer = ErrorLayer.PRESERVE


@dataclass(frozen=True)
class Archive:
    """A host-side copy of a guest's preserved paths and what it holds."""

    path: Path
    roots: tuple[str, ...]  # paths relative to the home ("." = all of it)
    entries: dict[str, str]  # relative path -> "f:<sha256>" | "l:<target>" | "d"

    @property
    def files(self) -> int:
        return sum(1 for v in self.entries.values() if v.startswith("f:"))

    def remove(self) -> None:
        self.path.unlink(missing_ok=True)


def relative_roots(paths: Sequence[str]) -> tuple[str, ...]:
    """``~`` → ``.``, ``~/src/`` → ``src``; anything else is refused (never outside home)."""
    out: list[str] = []
    for p in paths:
        if p == "~":
            rel = "."
        elif p.startswith("~/") and p[2:].strip("/"):
            rel = p[2:].strip("/")
        else:
            raise PreserveError(f"preserve path {p!r} must be ~ or under ~/")
        parts = rel.split("/")
        if rel != "." and any(x in ("", ".", "..") for x in parts):
            raise PreserveError(f"preserve path {p!r} must not contain '.' or '..' segments")
        out.append(rel)
    return tuple(dict.fromkeys(out))


def _as_user(endpoint: GuestEndpoint, user: str, script: str, *args: str) -> str:
    argv = ["bash", "-c", script, "sand-preserve", *args]
    if endpoint.user != user:
        argv = ["sudo", "-n", "-H", "-u", user, "--", *argv]
    return shlex.join(argv)


async def archive_out(
    endpoint: GuestEndpoint, user: str, paths: Sequence[str], dest: Path
) -> Archive:
    """Stream a tar of ``paths`` from the guest into ``dest`` (created 0600, never replaced)."""
    roots = relative_roots(paths)
    stdin = b"".join(r.encode() + b"\0" for r in roots)
    ensure_private_dir(dest.parent)
    if os.path.lexists(dest):
        raise PreserveError(f"{dest} exists already; refusing to overwrite it")
    fd = open_private(dest, os.O_WRONLY | os.O_EXCL)
    try:
        async with connect(endpoint) as conn:
            runner = SshRunner(conn, "preserve: archive", where=where(endpoint))
            with os.fdopen(fd, "wb") as out:
                result = await runner.run_command(
                    _as_user(endpoint, user, ARCHIVE_SCRIPT), stdin=stdin, stdout=out, timeout=None
                )
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    if result.exit_status != 0:
        dest.unlink(missing_ok=True)
        raise PreserveError(
            f"archiving {', '.join(paths)} in {where(endpoint)} failed "
            f"(exit {result.exit_status}): {_err(result)}"
        )
    try:
        entries = read_entries(dest)
        stray = [p for p in entries if not _under(p, roots)]
        if stray:
            # The old guest is not trusted to say what it sends: only the named paths go.
            raise PreserveError(
                f"the archive from {where(endpoint)} holds {stray[0]!r}, outside the "
                "preserved paths; refusing it"
            )
    except PreserveError:
        dest.unlink(missing_ok=True)
        raise
    return Archive(dest, roots, entries)


def _under(path: str, roots: Sequence[str]) -> bool:
    if path.startswith("/") or ".." in path.split("/"):
        return False
    return any(r == "." or path == r or path.startswith(r + "/") for r in roots)


async def restore_in(
    endpoint: GuestEndpoint, user: str, archive: Archive, *, missing_only: bool = False
) -> None:
    """Put the archive's paths in place in the guest and prove they arrived intact.

    ``missing_only`` (after a reprovision): only absent entries are restored, and
    the proof is that every entry exists again."""
    async with connect(endpoint) as conn:
        runner = SshRunner(conn, "preserve: restore", where=where(endpoint))
        if archive.entries:
            script = RESTORE_MISSING_SCRIPT if missing_only else RESTORE_SCRIPT
            command = _as_user(endpoint, user, script, *archive.roots)
            with open(archive.path, "rb") as data:
                restored = await runner.run_command(command, stdin=data, limit=None, timeout=None)
            if restored.exit_status != 0:
                raise PreserveError(f"restoring into {where(endpoint)} failed: {_err(restored)}")
        found = await _digests(runner, _as_user(endpoint, user, DIGEST_SCRIPT, *archive.roots))
    if missing_only:
        problems = [f"{p}: missing" for p in sorted(archive.entries) if p not in found]
    else:
        problems = compare(archive, found)
    if problems:
        shown = "; ".join(problems[:5]) + (
            f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
        )
        raise PreserveError(f"preserved paths arrived different in {where(endpoint)}: {shown}")


def compare(archive: Archive, found: dict[str, str]) -> list[str]:
    """Entries missing or different in the guest; under a path other than the whole
    home, entries the archive does not have too (the restore is exact there)."""
    problems = [
        f"{path}: {'missing' if path not in found else 'differs'}"
        for path, want in sorted(archive.entries.items())
        if found.get(path) != want
    ]
    exact = [r for r in archive.roots if r != "."]
    problems += [
        f"{path}: not in the archive"
        for path in sorted(found)
        if path not in archive.entries and any(path == r or path.startswith(r + "/") for r in exact)
    ]
    return problems


def read_entries(path: Path) -> dict[str, str]:
    """Every entry of a tar with a digest of what it holds (read on the host)."""
    entries: dict[str, str] = {}
    if path.stat().st_size == 0:
        return entries  # none of the paths existed in the guest
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                name = _norm(member.name)
                if member.isdir():
                    entries[name] = "d"
                elif member.issym():
                    entries[name] = "l:" + member.linkname
                elif member.isfile():
                    sha = hashlib.sha256()
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    while chunk := extracted.read(CHUNK):
                        sha.update(chunk)
                    entries[name] = "f:" + sha.hexdigest()
                elif member.islnk():
                    entries[name] = entries.get(_norm(member.linkname), "f:?")
    except tarfile.TarError as exc:
        raise PreserveError(f"the archive from the guest is not readable: {exc}") from None
    return entries


def _norm(name: str) -> str:
    name = name.rstrip("/")
    while name.startswith("./"):
        name = name[2:]
    return name or "."


def _err(result: RunResult) -> str:
    return result.stderr[-2000:].decode(errors="replace").strip()


async def _digests(runner: SshRunner, command: str) -> dict[str, str]:
    # Unbounded: one record per file, and a restored ~/src may hold a great many.
    result = await runner.run_command(
        command, limit=None, timeout=TIMEOUT, step="preserve: list restored paths"
    )
    if result.exit_status != 0:
        err = result.stderr.decode(errors="replace")
        raise PreserveError(f"listing the restored paths failed: {err}")
    fields = result.stdout.split(b"\0")
    found: dict[str, str] = {}
    for i in range(0, len(fields) - 2, 3):
        kind, value, path = (f.decode(errors="surrogateescape") for f in fields[i : i + 3])
        found[_norm(path)] = {"f": "f:" + value, "l": "l:" + value, "d": "d"}.get(kind, kind)
    return found
