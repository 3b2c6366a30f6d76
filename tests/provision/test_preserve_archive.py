"""The host side of preserve: what an archive holds, and when a restore counts as equal.
(The guest side — tar out, rm + tar in, the digest listing — runs on real guests in
tests/e2e/test_safe_replace_guests.py.)"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from sand.provision.preserve import (
    ARCHIVE_SCRIPT,
    DIGEST_SCRIPT,
    RESTORE_SCRIPT,
    Archive,
    PreserveError,
    compare,
    read_entries,
    relative_roots,
)


def bash(script: str, home: Path, *args: str, stdin: bytes = b"") -> bytes:
    proc = subprocess.run(
        ["bash", "-c", script, "t", *args],
        input=stdin,
        capture_output=True,
        env={"HOME": str(home), "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return proc.stdout


def guest_digests(home: Path, roots: tuple[str, ...]) -> dict[str, str]:
    out = bash(DIGEST_SCRIPT, home, *roots).split(b"\0")
    return {
        out[i + 2].decode().removeprefix("./"): {"f": "f:", "l": "l:", "d": "d"}[out[i].decode()]
        + (out[i + 1].decode() if out[i] != b"d" else "")
        for i in range(0, len(out) - 2, 3)
    }


@pytest.fixture
def old_home(tmp_path: Path) -> Path:
    home = tmp_path / "old"
    (home / "src/app").mkdir(parents=True)
    (home / "src/app/main.py").write_text("print('work')\n")
    (home / "src/app/link").symlink_to("main.py")
    (home / ".ssh").mkdir()
    (home / ".ssh/authorized_keys").write_text("ssh-ed25519 OLD\n")
    (home / "notes.txt").write_text("not preserved\n")
    return home


def test_roots_stay_inside_the_home():
    assert relative_roots(["~/src/", "~", "~/.claude", "~/src"]) == ("src", ".", ".claude")
    for bad in ["/etc", "~/../x", "~/a/../b", "src", "~/./x"]:
        with pytest.raises(PreserveError):
            relative_roots([bad])


def test_an_archive_made_by_the_guest_script_restores_exactly(old_home: Path, tmp_path: Path):
    roots = relative_roots(["~/src", "~/missing"])
    tar = tmp_path / "a.tar"
    tar.write_bytes(
        bash(ARCHIVE_SCRIPT, old_home, stdin=b"".join(r.encode() + b"\0" for r in roots))
    )
    archive = Archive(tar, roots, read_entries(tar))
    want = hashlib.sha256(b"print('work')\n").hexdigest()
    assert archive.entries["src/app/main.py"] == f"f:{want}"
    assert archive.entries["src/app/link"] == "l:main.py"
    assert "notes.txt" not in archive.entries

    new_home = tmp_path / "new"
    (new_home / "src/app").mkdir(parents=True)
    (new_home / "src/app/fresh-clone-file").write_text("from a fresh clone\n")
    bash(RESTORE_SCRIPT, new_home, *roots, stdin=tar.read_bytes())
    found = guest_digests(new_home, roots)
    assert compare(archive, found) == []
    assert not (new_home / "src/app/fresh-clone-file").exists()  # exact, not merged

    (new_home / "src/app/main.py").write_text("changed\n")
    assert compare(archive, guest_digests(new_home, roots)) == ["src/app/main.py: differs"]


def test_the_whole_home_never_carries_the_login_key(old_home: Path, tmp_path: Path):
    tar = tmp_path / "h.tar"
    tar.write_bytes(bash(ARCHIVE_SCRIPT, old_home, stdin=b".\0"))
    entries = read_entries(tar)
    assert "notes.txt" in entries and ".ssh/authorized_keys" not in entries


def test_nothing_to_keep_is_an_empty_archive(tmp_path: Path):
    home = tmp_path / "h"
    home.mkdir()
    tar = tmp_path / "e.tar"
    tar.write_bytes(bash(ARCHIVE_SCRIPT, home, stdin=b"src\0"))
    assert tar.stat().st_size == 0 and read_entries(tar) == {}
