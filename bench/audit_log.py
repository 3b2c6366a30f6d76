"""The audit log's cost: one append (p99), and verifying a million records.

    python bench/audit_log.py [--appends 5000] [--records 1000000]

Appends go through ``AuditLog.append`` as sand's ``record()`` makes them (a record of
an apply's change, who and when included), each timed on its own; beside them the floor,
the same line written with one ``os.write`` to an ``O_APPEND`` file (no lock, no tail,
no hash). Verifying reads a log of N records written in batches (a checkpoint signed
every 1,000, as appends make them) and walks it as ``sand audit verify`` does; beside
it the floor, reading the file and hashing each line. The machine's load (``uptime``)
is printed with the figures: a loaded machine's p99 is its scheduler's as much as
sand's. Goals (issue 42): append p99 ≤ 1 ms; 1,000,000 records verified in ≤ 10 s.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import summary  # noqa: E402
from sand.audit import seal  # noqa: E402
from sand.audit.chain import encode  # noqa: E402
from sand.audit.keys import SIGNING_PUB, parse_public  # noqa: E402
from sand.audit.log import LOG_FILE, AuditLog  # noqa: E402
from sand.audit.trail import who  # noqa: E402
from sand.audit.verify import verify  # noqa: E402

BATCH = 10_000


def body(i: int) -> dict[str, object]:
    return {
        **who(),
        "project": "bench",
        "vm": f"agent-{i % 50}",
        "backend": "pve",
        "change": "update",
        "ok": True,
        "manifest": "/home/me/fleet/sand.yaml",
        "manifest_sha256": "ab" * 32,
        "fields": ["memory"],
    }


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def p(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def appends(directory: Path, count: int) -> tuple[list[float], list[float]]:
    log = AuditLog(directory / "audit")
    log.append("bench.warm", body(0))  # the key made, the file opened
    times = []
    for i in range(count):
        started = time.perf_counter()
        log.append("apply.change", body(i))
        times.append(time.perf_counter() - started)
    floor = []
    fd = os.open(directory / "floor.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        for i in range(count):
            line = encode(i + 1, "0" * 64, "apply.change", body(i))
            started = time.perf_counter()
            os.write(fd, line)
            floor.append(time.perf_counter() - started)
    finally:
        os.close(fd)
    return times, floor


def verification(directory: Path, records: int) -> tuple[float, float, int]:
    """(seconds to verify, seconds to read and hash each line, records checked)."""
    home = directory / "audit"
    log = AuditLog(home)
    for start in range(0, records, BATCH):
        log.append_many(
            ("apply.change", body(i)) for i in range(start, min(records, start + BATCH))
        )
    claim = log.checkpoint()
    pub = parse_public((home / SIGNING_PUB).read_text())
    started = time.perf_counter()
    report = verify(home / LOG_FILE, pub, [seal.read_head(home) or claim])
    took = time.perf_counter() - started
    if not report.ok:
        raise RuntimeError(f"the bench's own log does not verify: {report.problem}")
    started = time.perf_counter()
    with (home / LOG_FILE).open("rb") as fh:
        for line in fh:
            hashlib.sha256(line).digest()
    return took, time.perf_counter() - started, report.records


def rows(appends_n: int = 5000, records: int = 1_000_000) -> list[tuple[str, str]]:
    with tempfile.TemporaryDirectory(prefix="sand-bench-audit-") as tmp:
        before = load()
        times, floor = appends(Path(tmp), appends_n)
        took, floor_read, checked = verification(Path(tmp), records)
        after = load()
    us = 1e6
    p99, floor_p99 = p(times, 0.99) * us, p(floor, 0.99) * us
    summary.record(
        "audit append, p99 of one event",
        p99,
        "µs",
        baseline=("one os.write", floor_p99),
        goal="≤ 1 ms",
    )
    summary.record(
        f"audit verify, {checked} records",
        took,
        "s",
        baseline=("read + sha256 per line", floor_read),
        goal="≤ 10 s for 1,000,000",
    )
    return [
        ("load average (1, 5, 15 min) before, after", f"{before}, {after}"),
        (
            f"append, {appends_n} events (µs)",
            f"p50 {p(times, 0.5) * us:.0f}, p99 {p99:.0f}, max {max(times) * us:.0f}",
        ),
        ("floor: one os.write (µs)", f"p50 {p(floor, 0.5) * us:.0f}, p99 {floor_p99:.0f}"),
        (f"verify {checked} records", f"{took:.2f} s ({took / checked * us:.1f} µs/record)"),
        ("floor: read + sha256 per line", f"{floor_read:.2f} s"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=5000)
    parser.add_argument("--records", type=int, default=1_000_000)
    args = parser.parse_args()
    for key, value in rows(args.appends, args.records):
        print(f"{key}: {value}")


if __name__ == "__main__":
    main()
