"""sand cp against a real guest's SFTP server: placement, links, no replacing."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sand.guest.sftp import open_sftp
from sand.verbs.copy import CopyRefused, download, upload
from sand.verbs.target import connect
from tests.verbs.rig_helpers import rig_endpoint, sh

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest


pytestmark = pytest.mark.e2e

TREE = r"""
set -e
mkdir -p ~/proj/src ~/.ssh
printf 'print(1)\n' > ~/proj/src/main.py
printf '#!/bin/sh\n' > ~/proj/run.sh && chmod 755 ~/proj/run.sh
ln -s /etc/shadow ~/proj/shadow
ln -s ~/.ssh ~/proj/keys
ln -s src ~/proj/inner
mkfifo ~/proj/pipe
printf x > ~/proj/$'bad\033[2Jname'
printf x > ~/proj/$'not-utf8-\xff'
head -c 3000000 /dev/urandom > ~/proj/blob.bin
sha256sum ~/proj/blob.bin | cut -d' ' -f1
"""


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_download_and_upload_over_sftp(netns_guest: MakeGuest, tmp_path: Path) -> None:
    guest = netns_guest()
    digest = (await sh(guest, TREE)).strip()
    host = tmp_path / "host"
    host.mkdir()
    notes: list[str] = []
    async with connect(rig_endpoint(guest)) as conn, open_sftp(conn) as fs:
        got = await download(fs, "~/proj", str(host), recursive=True, report=notes.append)
        assert got.target == str(host / "proj")
        names = sorted(str(p.relative_to(host / "proj")) for p in (host / "proj").rglob("*"))
        assert names == ["blob.bin", "run.sh", "src", "src/main.py"]
        assert not any(p.is_symlink() for p in host.rglob("*"))
        assert hashlib.sha256((host / "proj" / "blob.bin").read_bytes()).hexdigest() == digest
        assert os.stat(host / "proj" / "run.sh").st_mode & 0o111
        assert len(notes) == 6 and all("\x1b" not in n for n in notes)
        assert sum("symlink" in n for n in notes) == 3

        with pytest.raises(CopyRefused, match="never replaces"):
            await download(fs, "~/proj", str(host), recursive=True, report=notes.append)
        with pytest.raises(CopyRefused, match="symlink in the guest"):
            await download(fs, "~/proj/keys", str(host / "k"), recursive=True, report=notes.append)

        # Upload back, twice: cp -r placement (as ~/back, then inside it).
        (host / "proj" / "link").symlink_to("/etc/hostname")
        first = await upload(fs, host / "proj", "~/back", recursive=True, report=notes.append)
        second = await upload(fs, host / "proj", "~/back", recursive=True, report=notes.append)
        assert (first.target, second.target) == ("back", "back/proj")
    listing = await sh(
        guest, "cd ~/back && find . | sort && readlink link && sha256sum blob.bin | cut -c1-64"
    )
    lines = listing.split()
    assert lines[-2:] == ["/etc/hostname", digest]
    assert "./proj/src/main.py" in lines and "./src/main.py" in lines
