"""``sand audit verify``: walk the chain once and name the first record it no longer vouches for.

Each line must be a record whose ``seq`` is its predecessor's plus one and whose
``prev`` is its predecessor's hash; each checkpoint must be signed by the pinned key
over the record before it; each claim from outside the log (``head.json``, an exported
checkpoint) must name a record the log still holds with that hash, followed by that
checkpoint. A fragment a killed writer left is reported, not failed: at the end of the
file (nobody wrote since), or acknowledged by the ``audit.torn`` record after it.

Where the chain breaks between lines i-1 and i, the record blamed is i when its own
``seq`` is out of place (a deletion or a reordering starts there), else i-1 (its bytes
no longer hash to the link i holds: it was edited, or i's link was, or it was
inserted): the first bad record is the first mutated line or the one just before it,
never a later one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from hashlib import sha256
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sand.audit import seal
from sand.audit.chain import CHECKPOINT, GENESIS, PREFIX, TORN
from sand.audit.keys import key_id


@dataclass(frozen=True)
class Torn:
    line: int
    offset: int
    length: int
    acknowledged: bool  # by the audit.torn record after it; else it ends the file


@dataclass(frozen=True)
class Problem:
    line: int  # 1-based line of the file; 0 when the record is missing altogether
    seq: int | None  # the seq that line claims, or the one missing
    message: str


@dataclass
class Report:
    records: int = 0
    checkpoints: int = 0
    last_signed: int = 0  # the highest seq a checkpoint in the log vouches for
    torn: list[Torn] = field(default_factory=list)
    problem: Problem | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


@dataclass
class _Walk:
    seq: int = 0
    link: str = GENESIS
    line: int = 0
    offset: int = 0
    # the state before the last record taken, and where it stood: a valid-looking
    # fragment is taken as a record until the audit.torn after it says otherwise
    before: tuple[int, str, int, int, str] | None = None
    # a line that is no record, until an audit.torn names it: (line, offset, length, sha)
    pending: tuple[int, int, int, str] | None = None


def verify(path: Path, pub: Ed25519PublicKey | None, claims: Iterable[seal.Claim] = ()) -> Report:
    report = Report()
    wanted = {c.seq: c for c in claims}
    found: dict[int, tuple[str, bytes]] = {}  # seq -> (hash, line after it)
    if 0 in wanted:
        found[0] = (GENESIS, b"")  # a checkpoint of the empty log, before its first record
    pinned = key_id(pub) if pub is not None else None
    w = _Walk()
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        fh = None
    if fh is not None:
        with fh:
            for raw in fh:
                if _step(w, raw, report, pub, pinned, wanted, found):
                    break
    if report.problem is None and w.pending is not None:
        line, _off, _len, _sha = w.pending
        report.problem = Problem(line, None, "not a record, and no audit.torn record names it")
    if report.problem is None:
        _check_claims(report, w, wanted, found, pub)
    return report


def _step(
    w: _Walk,
    raw: bytes,
    report: Report,
    pub: Ed25519PublicKey | None,
    pinned: str | None,
    wanted: dict[int, seal.Claim],
    found: dict[int, tuple[str, bytes]],
) -> bool:
    """Take one line; True when the walk is over (a problem, or the torn end)."""
    w.line += 1
    offset = w.offset
    w.offset += len(raw)
    if not raw.endswith(b"\n"):
        report.torn.append(Torn(w.line, offset, len(raw), acknowledged=False))
        return True
    body = raw[:-1]
    digest = sha256(body).hexdigest()
    match = PREFIX.match(body)
    if w.pending is not None and (match is None or match[3] != TORN.encode()):
        line, *_ = w.pending
        report.problem = Problem(line, None, "not a record, and no audit.torn record names it")
        return True
    if match is None:
        w.pending = (w.line, offset, len(body), digest)
        return False
    seq, prev, kind = int(match[1]), match[2].decode(), match[3].decode()
    if kind == TORN:
        _take_torn(w, body, report)
    if prev != w.link:
        previous = w.line > 1 and seq in (w.seq + 1, w.seq)
        what = "its hash is not the link the next record holds" if previous else "out of place"
        report.problem = Problem(
            w.line - 1 if previous else w.line,
            w.seq if previous else seq,
            f"the chain breaks here: {what} (edited, inserted, deleted or moved)",
        )
        return True
    if seq != w.seq + 1:
        report.problem = Problem(
            w.line, seq, f"seq {seq} where {w.seq + 1} belongs (records deleted, inserted or moved)"
        )
        return True
    if kind == CHECKPOINT:
        problem = _check_checkpoint(body, seq, prev, pub, pinned)
        if problem:
            report.problem = Problem(w.line, seq, problem)
            return True
        report.checkpoints += 1
        report.last_signed = seq - 1
    if seq - 1 in found:
        found[seq - 1] = (found[seq - 1][0], body)
    if seq in wanted:
        found[seq] = (digest, b"")
    w.before = (w.seq, w.link, w.line, offset, digest)
    w.seq, w.link = seq, digest
    report.records += 1
    return False


def _take_torn(w: _Walk, body: bytes, report: Report) -> None:
    """An audit.torn record owns up to the line before it: a non-record line, or one taken
    as a record until now (then the walk steps back to before it)."""
    try:
        named = json.loads(body)
        at, length, sha = (
            named["fragment_offset"],
            named["fragment_bytes"],
            named["fragment_sha256"],
        )
    except (ValueError, KeyError, TypeError):
        return
    if w.pending is not None:
        line, offset, plen, psha = w.pending
        if (offset, plen, psha) == (at, length, sha):
            report.torn.append(Torn(line, offset, plen, acknowledged=True))
            w.pending = None
        return
    if w.before is not None:
        seq, link, line, offset, psha = w.before
        if (offset, psha) == (at, sha) and w.offset - offset >= length:
            report.torn.append(Torn(line, offset, length, acknowledged=True))
            w.seq, w.link, w.before = seq, link, None
            report.records -= 1


def _check_checkpoint(
    body: bytes, seq: int, prev: str, pub: Ed25519PublicKey | None, pinned: str | None
) -> str | None:
    try:
        rec = json.loads(body)
        claim = seal.Claim(seq - 1, prev, str(rec["key"]), str(rec["sig"]), "")
        if set(rec) != {"seq", "prev", "kind", "key", "sig"}:
            return "a checkpoint with fields a checkpoint does not have"
    except (ValueError, KeyError, TypeError):
        return "a checkpoint that cannot be read"
    if pub is None:
        return None  # no key to check against: the chain alone is checked
    if claim.key != pinned:
        return f"a checkpoint signed by another key ({claim.key}, the pinned one is {pinned})"
    if not seal.signed_by(claim, pub):
        return "a checkpoint whose signature does not hold"
    return None


def _check_claims(
    report: Report,
    w: _Walk,
    wanted: dict[int, seal.Claim],
    found: dict[int, tuple[str, bytes]],
    pub: Ed25519PublicKey | None,
) -> None:
    for seq in sorted(wanted):
        claim = wanted[seq]
        if pub is not None and not seal.signed_by(claim, pub):
            report.problem = Problem(
                0,
                seq,
                f"the checkpoint of record {seq} from outside the log is not signed "
                "by the pinned key",
            )
            return
        if seq + 1 > w.seq:
            report.problem = Problem(
                0,
                min(seq, w.seq + 1),
                f"truncated: a checkpoint vouches for record {seq} and its checkpoint, "
                f"the log ends at record {w.seq}",
            )
            return
        digest, after = found.get(seq, ("", b""))
        if (
            digest != claim.head
            or f',"kind":"{CHECKPOINT}",'.encode() not in after[:120]
            or claim.sig.encode() not in after
        ):
            report.problem = Problem(
                0,
                seq,
                f"record {seq} is not the one a checkpoint signed: the log was rewritten "
                "at or before it",
            )
            return
