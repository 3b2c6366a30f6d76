"""The host's own YAML files in the host dir (``secrets.yaml``, ``pins.yaml``), read
only when nobody but their owner could have written them.

Whoever can write ``secrets.yaml`` chooses the commands sand runs for a secret, and
whoever can write ``pins.yaml`` chooses where the host's tokens are sent. So they are
checked as sshd checks ``authorized_keys`` (its ``StrictModes``): the file and every
directory from it up to the host dir belong to the user running sand or to root, and
neither group nor others may write them (a directory others may write lets them swap
the file). A file that fails is refused, naming the path and the command that fixes
it; sand never changes it itself.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from sand.errors import ManifestError, Problem
from sand.manifest.loader import MAX_BYTES
from sand.manifest.yamlmarks import MarkedData, load_marked


def _user(uid: int) -> str:
    import pwd  # here, not at the top: only a refusal names a user

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def untrusted_problem(file: Path, top: Path) -> str | None:
    """Why ``file`` (in the host dir ``top``) may have been written by someone else than
    the user running sand or root, or None. Symbolic links are followed, as sshd does:
    the directories checked are those the file really lies in."""
    me = os.geteuid()
    real = file.resolve()
    stop = top.resolve()
    for path in (real, *real.parents):
        try:
            info = path.stat()
        except OSError as exc:
            return f"{path} cannot be read: {exc.strerror}"
        if info.st_uid not in (me, 0):
            owners = "root" if me == 0 else f"{_user(me)} or root"
            return (
                f"{path} belongs to {_user(info.st_uid)}, not to {owners}, so they choose "
                f"what sand does; fix: chown {_user(me)} {path}"
            )
        if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            return (
                f"{path} is writable by group or others (mode "
                f"{stat.S_IMODE(info.st_mode):04o}), so they choose what sand does; "
                f"fix: chmod go-w {path}"
            )
        if path == stop:
            break
    return None


def host_file_error(problems: list[Problem], file: Path) -> ManifestError:
    """A problem of a host's own file (secrets.yaml, pins.yaml), told as such: the
    manifest itself may be fine, and "the manifest is invalid" sent people to it."""
    count = len(problems)
    return ManifestError(
        problems,
        summary=f"the host's {file.name} is not used ({count} problem{'s' * (count != 1)}): "
        f"fix {file}",
    )


def read_host_file(file: Path, top: Path, shape: str) -> MarkedData | None:
    """``file``'s YAML with its marks, None when it does not exist (it says nothing).
    ``shape`` completes "must be" when the top is not a mapping. Every problem is a
    ManifestError located in ``file``."""
    where = str(file)
    try:
        size = file.stat().st_size
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise host_file_error(
            [Problem(where, 1, 1, f"cannot read: {exc.strerror}")], file
        ) from None
    untrusted = untrusted_problem(file, top)
    if untrusted:
        raise host_file_error([Problem(where, 1, 1, f"not read: {untrusted}")], file)
    if size > MAX_BYTES:
        raise host_file_error([Problem(where, 1, 1, "larger than 4 MiB")], file)
    try:
        text = file.read_bytes().decode("utf-8")
    except OSError as exc:
        raise host_file_error(
            [Problem(where, 1, 1, f"cannot read: {exc.strerror}")], file
        ) from None
    except UnicodeDecodeError as exc:
        raise host_file_error([Problem(where, 1, 1, f"not UTF-8: {exc.reason}")], file) from None
    marked, yaml_problems = load_marked(text)
    if yaml_problems:
        raise host_file_error(
            [Problem(where, p.mark.line, p.mark.column, p.message) for p in yaml_problems], file
        )
    if marked.data is None:
        return None
    if not isinstance(marked.data, dict):
        raise host_file_error([Problem(where, 1, 1, f"must be {shape}")], file)
    return marked
