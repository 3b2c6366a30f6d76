"""1,000 random edits, deletions, insertions and reorderings of a sealed log: every one found,
and the record named is the first one changed (or, for a changed link, the one before it)."""

from __future__ import annotations

import random
import shutil
from collections import Counter
from pathlib import Path

from sand.audit import seal
from sand.audit.log import LOG_FILE, AuditLog
from sand.audit.verify import verify
from tests.audit.helpers import pinned_key

TRIALS = 1000
RECORDS = 300


def sealed_log(directory: Path) -> list[bytes]:
    log = AuditLog(directory)
    rng = random.Random(7)
    for i in range(RECORDS):
        log.append("x.event", {"vm": f"agent-{i % 5}", "n": i, "note": "ab" * rng.randint(1, 30)})
        if i % 97 == 96:
            log.checkpoint()
    log.checkpoint()
    return (directory / LOG_FILE).read_bytes().splitlines(keepends=True)


def mutate(rng: random.Random, original: list[bytes]) -> tuple[str, list[bytes]]:
    out = list(original)
    how = rng.choice(("edit", "delete", "insert", "reorder"))
    k = rng.randrange(len(out))
    if how == "edit":
        line = bytearray(out[k])
        at = rng.randrange(len(line) - 1)  # any byte but the newline
        line[at] = rng.choice([b for b in range(32, 127) if b != line[at]])
        out[k] = bytes(line)
    elif how == "delete":
        del out[k : k + rng.randint(1, 3)]
    elif how == "insert":
        forged = rng.choice(
            (
                rng.choice(original),
                b'{"seq":1,"note":"forged"}\n',
                b"\n",
                rng.choice(original)[:40] + b"\n",
            )
        )
        out.insert(rng.randrange(len(out) + 1), forged)
    else:
        j = rng.randrange(len(out))
        while j == k:
            j = rng.randrange(len(out))
        out[k], out[j] = out[j], out[k]
    return how, out


def first_difference(a: list[bytes], b: list[bytes]) -> int:
    """The 1-based line where ``b`` first differs from ``a``."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i + 1
    return min(len(a), len(b)) + 1


def test_every_mutation_is_found_and_the_first_bad_record_named(tmp_path: Path) -> None:
    home = tmp_path / "audit"
    original = sealed_log(home)
    pub = pinned_key(home)
    head = seal.read_head(home)
    assert head is not None
    path = home / LOG_FILE
    pristine = tmp_path / "pristine"
    shutil.copy(path, pristine)
    assert verify(path, pub, [head]).ok

    rng = random.Random(42)
    missed: list[str] = []
    misnamed: list[str] = []
    kinds: Counter[str] = Counter()
    for trial in range(TRIALS):
        how, mutated = mutate(rng, original)
        kinds[how] += 1
        path.write_bytes(b"".join(mutated))
        report = verify(path, pub, [head])
        where = first_difference(original, mutated)
        if report.ok:
            missed.append(f"{trial}: {how} at line {where}")
            continue
        problem = report.problem
        assert problem is not None
        # a claim from outside the log (line 0) names the record by its seq, which is its
        # line in a log with no torn fragment
        named = problem.line or problem.seq
        if named not in (where - 1, where):
            misnamed.append(f"{trial}: {how} at {where}, named {named}: {problem.message}")
    assert min(kinds.values()) > TRIALS // 5, kinds  # each kind of mutation well tried
    assert not missed, f"{len(missed)} of {TRIALS} mutations went unseen: {missed[:5]}"
    assert not misnamed, misnamed[:5]
