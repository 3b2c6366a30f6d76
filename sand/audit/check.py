"""What ``sand audit verify`` holds the host's log to: the pinned key, ``head.json``, and
every checkpoint exported to the git refs it is given."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sand.audit import seal
from sand.audit.export import exported_claims
from sand.audit.keys import SIGNING_PUB, parse_public
from sand.audit.log import LOG_FILE
from sand.audit.verify import Problem, Report, verify


@dataclass(frozen=True)
class Export:
    repo: str
    ref: str


def check_host(
    directory: Path, *, against: Iterable[Export] = (), key: Path | None = None
) -> Report:
    """Verify the log in ``directory``. ``key``: the public key line to pin (else the host's
    ``signing.pub``, which an export's first commit must match)."""
    key_path = key or directory / SIGNING_PUB
    try:
        key_text = key_path.read_text()
    except FileNotFoundError:
        key_text = ""
    claims: list[seal.Claim] = []
    try:
        head = seal.read_head(directory)
    except ValueError as exc:
        return Report(problem=Problem(0, None, f"head.json is not a checkpoint: {exc}"))
    if head is not None:
        claims.append(head)
    for export in against:
        exported, first_pub = exported_claims(export.repo, export.ref)
        if first_pub is not None and key_text and first_pub.strip() != key_text.strip():
            return Report(
                problem=Problem(
                    0,
                    None,
                    f"the key that signed the first checkpoint exported to {export.repo} "
                    f"{export.ref} is not {key_path}: the host key was replaced",
                )
            )
        key_text = key_text or (first_pub or "")
        claims.extend(exported)
    if not key_text and (claims or (directory / LOG_FILE).exists()):
        return Report(
            problem=Problem(0, None, f"no public key to check the checkpoints with ({key_path})")
        )
    try:
        pub = parse_public(key_text) if key_text else None
    except ValueError as exc:
        return Report(problem=Problem(0, None, f"{key_path} is not an audit public key: {exc}"))
    seen: dict[int, seal.Claim] = {}
    for claim in claims:
        if seen.setdefault(claim.seq, claim).head != claim.head:
            # both may be signed: the log was rewritten after one of them was exported
            message = f"two checkpoints of record {claim.seq} disagree on its hash: rewritten"
            return Report(problem=Problem(0, claim.seq, message))
    return verify(directory / LOG_FILE, pub, seen.values())
