"""``python -m sand.broker PROJECT``: the project's broker process (sand.broker.daemon)."""

from __future__ import annotations

import sys

from sand.broker.daemon import main

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m sand.broker PROJECT")
    sys.exit(main(sys.argv[1]))
