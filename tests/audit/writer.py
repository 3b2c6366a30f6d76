"""A sand process that only appends to the host's audit log: ``python -m tests.audit.writer
COUNT SIZE TAG`` appends COUNT records (forever when 0) of a SIZE-byte field, tagged."""

from __future__ import annotations

import itertools
import sys

from sand.audit.trail import record


def main() -> None:
    count, size, tag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    filler = "x" * size
    for n in itertools.count(1) if count == 0 else range(1, count + 1):
        record("test.append", tag=tag, n=n, filler=filler)


if __name__ == "__main__":
    main()
