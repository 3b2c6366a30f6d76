"""Checkpoints exported to a git ref (or a syslog collector), where the host's user alone
cannot take them back.

``export_git`` adds one commit to ``REF`` of a repository (``refs/sand/audit/<host>`` by
default) holding ``checkpoint.json`` (the latest signed claim) and ``signing.pub``; its
parent is the ref's previous commit, and the push is a plain fast-forward, so a
repository that refuses forced pushes and ref deletions (a protected ref, a server hook,
a receiving side run by someone else) keeps every checkpoint ever exported. ``sand audit
verify --against REPO`` reads them all back and holds the local log to each one.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import tempfile
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from sand.audit import seal
from sand.audit.keys import SIGNING_PUB
from sand.errors import StateError

CLAIM_FILE = "checkpoint.json"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")
# commits made by sand on the user's behalf: no git identity needs to be configured
_IDENTITY = {
    "GIT_AUTHOR_NAME": "sand audit",
    "GIT_AUTHOR_EMAIL": "sand-audit@localhost",
    "GIT_COMMITTER_NAME": "sand audit",
    "GIT_COMMITTER_EMAIL": "sand-audit@localhost",
}


def default_ref() -> str:
    return "refs/sand/audit/" + (_SAFE.sub("-", socket.gethostname()).strip(".-") or "host")


def export_git(directory: Path, claim: seal.Claim, repo: str, ref: str) -> str:
    """Push ``claim`` as a new commit on ``ref`` of ``repo``; the commit's id."""
    with tempfile.TemporaryDirectory(prefix="sand-audit-") as tmp:
        git = _Git(Path(tmp))
        parent = git.fetch(repo, ref)
        if parent:
            before = seal.Claim.from_json(git.run("show", f"{parent}:{CLAIM_FILE}"))
            if before.seq > claim.seq:
                raise StateError(
                    f"{repo} {ref} already holds a checkpoint of record {before.seq}, past this "
                    f"log's {claim.seq}: the log was cut short (sand audit verify --against {repo})"
                )
        claim_blob = git.run("hash-object", "-w", "--stdin", data=claim.to_json())
        pub_blob = git.run(
            "hash-object", "-w", "--stdin", data=(directory / SIGNING_PUB).read_text()
        )
        tree = git.run(
            "mktree",
            data=f"100644 blob {claim_blob}\t{CLAIM_FILE}\n100644 blob {pub_blob}\t{SIGNING_PUB}\n",
        )
        message = f"sand audit checkpoint: record {claim.seq} is {claim.head}"
        commit = git.run("commit-tree", tree, *(("-p", parent) if parent else ()), "-m", message)
        git.run("push", "--quiet", repo, f"{commit}:{ref}")
        return commit


def exported_claims(repo: str, ref: str) -> tuple[list[seal.Claim], str | None]:
    """Every checkpoint exported to ``ref`` of ``repo``, newest first, and the public key
    line of the first export (the one the host started with); none when the ref is absent."""
    with tempfile.TemporaryDirectory(prefix="sand-audit-") as tmp:
        git = _Git(Path(tmp))
        tip = git.fetch(repo, ref)
        if not tip:
            return [], None
        commits = git.run("rev-list", "--first-parent", tip).split()
        claims = [seal.Claim.from_json(git.run("show", f"{c}:{CLAIM_FILE}")) for c in commits]
        first_pub = git.run("show", f"{commits[-1]}:{SIGNING_PUB}")
        return claims, first_pub


def export_syslog(claim: seal.Claim, target: str) -> None:
    """Send ``claim`` as one RFC 5424 message over UDP to ``target`` (``HOST:PORT``), for a
    collector the host's user does not run: facility auth, severity notice, app ``sand``,
    the claim's fields as the message (``sand audit verify`` takes the claims back from
    wherever the collector keeps them only by hand, as ``head.json`` files)."""
    host, port = syslog_target(target)
    pri = 4 * 8 + 5  # auth, notice
    when = datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    text = f"sand-audit-checkpoint {json.dumps(asdict(claim), sort_keys=True)}"
    message = f"<{pri}>1 {when} {socket.gethostname()} sand {os.getpid()} audit - {text}"
    try:
        with socket.socket(_family(host), socket.SOCK_DGRAM) as sock:
            sock.sendto(message.encode(), (host, port))
    except OSError as exc:
        raise StateError(f"cannot send the checkpoint to syslog {target}: {exc}") from exc


def syslog_target(target: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) as an address; StateError for anything else."""
    host, _, port = target.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise StateError(f"--syslog {target!r}: give HOST:PORT of a syslog collector (UDP)")
    return host.strip("[]"), int(port)


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class _Git:
    def __init__(self, where: Path) -> None:
        self.where = where
        self.run("init", "--quiet", "--bare")

    def fetch(self, repo: str, ref: str) -> str:
        """The commit ``ref`` of ``repo`` points at, fetched here; "" when there is none."""
        listed = self.run("ls-remote", repo, ref)
        if not listed:
            return ""
        self.run("fetch", "--quiet", repo, f"+{ref}:refs/audit/tip")
        return self.run("rev-parse", "refs/audit/tip")

    def run(self, *argv: str, data: str | None = None) -> str:
        env = {**os.environ, **_IDENTITY, "GIT_DIR": str(self.where), "GIT_TERMINAL_PROMPT": "0"}
        try:
            done = subprocess.run(
                ["git", *argv], input=data, env=env, capture_output=True, text=True, check=False
            )
        except OSError as exc:
            raise StateError(f"cannot run git: {exc}") from exc
        if done.returncode != 0:
            raise StateError(f"git {argv[0]} failed: {done.stderr.strip() or done.returncode}")
        return done.stdout.strip()
