"""What one webhook costs ``sand sync`` in git (issue 41, item 6): the pushed commit is
fetched by one ``git fetch`` and read by one ``git log`` and one ``git cat-file``, with
no housekeeping in between (``git fetch`` runs ``git maintenance run --auto`` after
every fetch, a process more before the apply can start); the housekeeping runs on a
check that finds nothing new. Seen by a ``git`` on PATH that logs each command git is
run with, sand's own and those git runs itself, then runs the real git; over one
HTTPS connection to the rig's server, the fetch's requests all authenticated."""

from __future__ import annotations

import hashlib
import hmac
import os
import shutil
from pathlib import Path

from tests.cli.sync_rig import Repo
from tests.cli.test_sync import HOOK_SECRET, _post, git, names, start_hooked_sync, vm_manifest

__all__ = ["git"]  # the fixture, used by name


def logging_git(directory: Path) -> tuple[Path, Path]:
    """A directory whose ``git`` logs its argv (one line a command) and runs the real
    git; and the log."""
    real = shutil.which("git")
    assert real is not None
    directory.mkdir()
    log = directory / "commands.log"
    wrapper = directory / "git"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >>"{log}"\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    log.touch()
    return directory, log


def sands_own(lines: list[str]) -> list[str]:
    """The commands sand ran on its mirror (``git -C <repo> ...``), by their verb."""
    out = []
    for line in lines:
        words = line.split()
        if words[:1] == ["-C"]:
            words = words[2:]
            while words[:1] == ["-c"]:
                words = words[2:]
            out.append(words[0])
    return out


def test_a_webhook_costs_one_fetch_and_the_housekeeping_waits(
    tmp_path, fakepve_server, git
) -> None:
    rig = fakepve_server
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "s-1"}]))
    wrapped, log = logging_git(tmp_path / "bin")
    env = {"PATH": f"{wrapped}:{os.environ['PATH']}"}
    sync, port = start_hooked_sync(tmp_path, rig, repo, env)

    def poke() -> None:
        body = b'{"ref": "refs/heads/main"}'
        signed = "sha256=" + hmac.new(HOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
        assert _post(port, body, {"X-Hub-Signature-256": signed}) == 202

    try:
        sync.wait_for(lambda: names(rig) == ["s-1"] and sync.said("applied (converged)"))
        log.write_text("")
        requests, connections = len(git.request_log), git.connections
        pushed = repo.push(vm_manifest(rig, [{"name": "s-1"}, {"name": "s-2"}]))
        poke()
        sync.wait_for(lambda: sync.said(f"revision {pushed[:12]} applied"))
        lines = log.read_text().splitlines()
        assert sands_own(lines) == ["fetch", "log", "cat-file"], lines
        assert not [line for line in lines if line.split()[:1] in (["maintenance"], ["gc"])]
        assert all(ok for path, ok in git.request_log[requests:] if "upload-pack" in path)
        # The fetch's four requests (refused without the token, then the refs, ls-refs,
        # the pack) over one connection: one TLS handshake.
        assert len(git.request_log) - requests == 4 and git.connections - connections == 1

        log.write_text("")
        poke()  # nothing new: the housekeeping's turn
        sync.wait_for(lambda: "gc" in sands_own(log.read_text().splitlines()))
        assert sands_own(log.read_text().splitlines()) == ["fetch", "log", "gc"]
        assert sync.applying()[-1] == pushed[:12] and names(rig) == ["s-1", "s-2"]
    finally:
        sync.stop()
