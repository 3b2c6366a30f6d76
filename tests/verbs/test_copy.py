"""sand cp's rules, with a host directory standing in for the guest's files."""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from sand.guest.fs import Entry, entry_from_mode
from sand.verbs.copy import CopyRefused, download, guest_path, upload
from tests.audit.helpers import audit_records


class DirGuestFS:
    """The guest's files as a host directory (relative paths start at ``home``)."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def _p(self, path: str) -> Path:
        return self.home / path

    async def lstat(self, path: str) -> Entry | None:
        try:
            st = os.lstat(self._p(path))
        except FileNotFoundError:
            return None
        return entry_from_mode(st.st_mode, st.st_size)

    async def stat(self, path: str) -> Entry | None:
        try:
            st = os.stat(self._p(path))
        except FileNotFoundError:
            return None
        return entry_from_mode(st.st_mode, st.st_size)

    async def realpath(self, path: str) -> str:
        return str(self._p(path).resolve())

    async def listdir(self, path: str) -> list[tuple[str, Entry]]:
        out = []
        for name in os.listdir(self._p(path)):
            st = os.lstat(self._p(path) / name)
            out.append((name, entry_from_mode(st.st_mode, st.st_size)))
        return out

    @contextlib.asynccontextmanager
    async def read(self, path: str) -> AsyncIterator[AsyncIterator[bytes]]:
        async def chunks() -> AsyncIterator[bytes]:
            yield self._p(path).read_bytes()

        yield chunks()

    async def write(self, path: str, local_fd: int, mode: int) -> None:
        data = b""
        while chunk := os.read(local_fd, 1 << 16):
            data += chunk
        self._p(path).write_bytes(data)
        self._p(path).chmod(mode)

    async def mkdir(self, path: str) -> None:
        self._p(path).mkdir()

    async def symlink(self, target: str, path: str) -> None:
        os.symlink(target, self._p(path))


class HostileFS(DirGuestFS):
    def __init__(self, home: Path, names: list[str]) -> None:
        super().__init__(home)
        self.names = names

    async def listdir(self, path: str) -> list[tuple[str, Entry]]:
        return [(n, Entry("file", 0o644, 1)) for n in self.names]


@pytest.fixture
def guest(tmp_path: Path) -> Path:
    g = tmp_path / "guest"
    (g / "proj" / "src").mkdir(parents=True)
    (g / "proj" / "src" / "main.py").write_text("print('hi')\n")
    (g / "proj" / "run.sh").write_text("#!/bin/sh\n")
    (g / "proj" / "run.sh").chmod(0o755)
    (g / "proj" / "to-passwd").symlink_to("/etc/passwd")
    (g / "proj" / "to-src").symlink_to("src")
    os.mkfifo(g / "proj" / "fifo")
    (g / "proj" / "evil\x1b[2Jname").write_text("x")
    (g / "notes.txt").write_text("notes\n")
    return g


@pytest.fixture
def host(tmp_path: Path) -> Path:
    h = tmp_path / "host"
    h.mkdir()
    return h


def tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): (
            "link" if p.is_symlink() else "dir" if p.is_dir() else p.read_text()
        )
        for p in sorted(root.rglob("*"))
    }


async def test_download_a_directory_into_an_existing_one_and_to_a_new_name(
    guest: Path, host: Path
) -> None:
    lines: list[str] = []
    fs = DirGuestFS(guest)
    summary = await download(fs, "~/proj", str(host), recursive=True, report=lines.append)
    assert summary.target == str(host / "proj")
    assert tree(host / "proj") == {
        "run.sh": "#!/bin/sh\n", "src": "dir", "src/main.py": "print('hi')\n"
    }  # fmt: skip
    assert os.stat(host / "proj" / "run.sh").st_mode & 0o111
    assert not os.stat(host / "proj" / "src" / "main.py").st_mode & 0o111
    assert (summary.files, summary.dirs, summary.skipped) == (2, 2, 4)
    assert sorted(lines) == [
        "skipped proj/evilname: its name has control or invisible characters",
        "skipped proj/fifo: not a regular file",
        "skipped proj/to-passwd: a symlink (guest links are never followed)",
        "skipped proj/to-src: a symlink (guest links are never followed)",
    ]
    await download(fs, "proj/", str(host / "copy"), recursive=True, report=lines.append)
    assert tree(host / "copy") == tree(host / "proj")


async def test_download_never_replaces_a_host_file(guest: Path, host: Path) -> None:
    fs = DirGuestFS(guest)
    (host / "notes.txt").write_text("mine\n")
    with pytest.raises(CopyRefused, match="never replaces"):
        await download(fs, "~/notes.txt", str(host), recursive=False, report=print)
    assert (host / "notes.txt").read_text() == "mine\n"
    victim = host / "victim"
    victim.write_text("precious\n")
    (host / "dangling").symlink_to(victim)
    with pytest.raises(CopyRefused, match="never replaces"):
        await download(fs, "~/notes.txt", str(host / "dangling"), recursive=False, report=print)
    (host / "proj").mkdir()
    with pytest.raises(CopyRefused, match="never replaces"):
        await download(fs, "~/proj", str(host), recursive=True, report=print)
    assert victim.read_text() == "precious\n"
    await download(fs, "~/notes.txt", str(host / "n2"), recursive=False, report=print)
    assert (host / "n2").read_text() == "notes\n"


async def test_download_refuses_guest_links_and_directories_without_r(
    guest: Path, host: Path
) -> None:
    fs = DirGuestFS(guest)
    with pytest.raises(CopyRefused, match="symlink in the guest"):
        await download(fs, "~/proj/to-src", str(host), recursive=True, report=print)
    with pytest.raises(CopyRefused, match="use -r"):
        await download(fs, "~/proj", str(host), recursive=False, report=print)
    with pytest.raises(CopyRefused, match="no such file"):
        await download(fs, "~/nope", str(host), recursive=False, report=print)
    with pytest.raises(CopyRefused, match="not a directory"):
        await download(fs, "~/notes.txt", str(host / "nodir") + "/", recursive=False, report=print)
    assert list(host.iterdir()) == []


@pytest.mark.parametrize("name", ["../escaped", "a/b", "..", ".", ""])
async def test_a_guest_listing_names_outside_the_directory_is_refused(
    guest: Path, host: Path, tmp_path: Path, name: str
) -> None:
    with pytest.raises(CopyRefused, match="not a file name"):
        await download(
            HostileFS(guest, [name]), "~/proj", str(host / "t"), recursive=True, report=print
        )
    assert not (tmp_path / "escaped").exists() and not (host / "escaped").exists()
    assert tree(host) == {"t": "dir"}


async def test_upload_places_like_cp_and_keeps_links_as_links(
    guest: Path, host: Path, tmp_path: Path
) -> None:
    src = host / "work"
    (src / "lib").mkdir(parents=True)
    (src / "lib" / "a.txt").write_text("a\n")
    (src / "secret-link").symlink_to(tmp_path / "host-secret")
    (tmp_path / "host-secret").write_text("host only\n")
    fs = DirGuestFS(guest)
    (guest / "dst").mkdir()
    first = await upload(fs, src, "~/new", recursive=True, report=print)
    second = await upload(fs, src, "~/new", recursive=True, report=print)
    assert (first.target, second.target) == ("new", "new/work")
    assert (guest / "new" / "lib" / "a.txt").read_text() == "a\n"
    assert (guest / "new" / "work" / "lib" / "a.txt").read_text() == "a\n"
    link = guest / "new" / "secret-link"
    assert link.is_symlink() and os.readlink(link) == str(tmp_path / "host-secret")
    # The link travelled, never the file it points to.
    assert not any(
        "host only" in p.read_text() for p in guest.rglob("*") if p.is_file() and not p.is_symlink()
    )
    one = await upload(fs, src / "lib" / "a.txt", "~/dst", recursive=False, report=print)
    assert one.target == "dst/a.txt"
    with pytest.raises(CopyRefused, match="use -r"):
        await upload(fs, src, "~/dst", recursive=False, report=print)
    with pytest.raises(CopyRefused, match="not a directory in the guest"):
        await upload(fs, src / "lib" / "a.txt", "~/missing/", recursive=False, report=print)


@pytest.mark.parametrize(
    ("path", "sftp"), [("~", "."), ("~/", "."), ("~/a/b", "a/b"), ("/srv/x", "/srv/x"), ("a", "a")]
)
def test_guest_paths(path: str, sftp: str) -> None:
    assert guest_path(path) == sftp


def test_other_users_homes_are_not_guessed() -> None:
    with pytest.raises(CopyRefused):
        guest_path("~root/x")


async def test_each_file_that_crosses_is_in_the_audit_trail_with_its_size_and_sha256(
    guest: Path, host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    fs = DirGuestFS(guest)
    await download(fs, "~/proj", str(host), recursive=True, report=print, vm="agent-1")
    (host / "up.bin").write_bytes(b"\x00upload\xff" * 100)
    await upload(fs, host / "up.bin", "~/", recursive=False, report=print, vm="agent-1")
    moved = [r for r in audit_records(tmp_path / "state") if r["kind"] == "cp.file"]
    seen = {(r["direction"], r["host_path"], r["guest_path"]): r for r in moved}
    assert set(seen) == {
        ("download", str(host / "proj" / "run.sh"), "proj/run.sh"),
        ("download", str(host / "proj" / "src" / "main.py"), "proj/src/main.py"),
        ("upload", str(host / "up.bin"), "./up.bin"),
    }
    for (_how, on_host, _in_guest), rec in seen.items():
        data = Path(on_host).read_bytes()
        assert (rec["vm"], rec["bytes"], rec["sha256"]) == (
            "agent-1", len(data), hashlib.sha256(data).hexdigest()
        )  # fmt: skip
