"""Serve a seeded fakepve behind the fidelity layer by hand::

    python3 -m tests.fakepve_rig serve --host 127.0.0.1 --port 8006 --pve-version 8 \\
        --nodes 2 --ready-file /tmp/pve.json

Nodes ``pve1``..``pveN``, template 9000 on ``pve1``'s ``local-lvm``, sand's least-
privilege token. Once listening, the ready file (JSON, mode 0600) holds ``url``,
``cafile``, ``token_id``, ``token_secret`` and ``pid``; it serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m tests.fakepve_rig")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve a seeded fakepve until SIGTERM")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0, help="0: the system picks one")
    serve.add_argument("--pve-version", type=int, choices=(8, 9), default=9)
    serve.add_argument("--nodes", type=int, default=1)
    serve.add_argument("--ready-file", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")

    from fakepve.certs import make_cert

    from tests.fakepve_rig.rig import FakePveRig

    workdir = Path(tempfile.mkdtemp(prefix="fakepve-rig-"))
    certfile, keyfile, _ = make_cert(str(workdir), hosts=(args.host,))
    rig = FakePveRig(
        (certfile, keyfile),
        workdir,
        nodes=[f"pve{i}" for i in range(1, args.nodes + 1)],
        pve_version=args.pve_version,
        host=args.host,
        port=args.port,
    )
    token_id, _, secret = rig.token_file.read_text(encoding="utf-8").strip().partition("=")
    ready = {
        "url": rig.url,
        "cafile": certfile,
        "token_id": token_id,
        "token_secret": secret,
        "pid": os.getpid(),
    }
    tmp = args.ready_file.with_name(args.ready_file.name + ".tmp")
    tmp.touch(mode=0o600)
    tmp.write_text(json.dumps(ready), encoding="utf-8")
    tmp.replace(args.ready_file)  # whole or absent: a reader never sees half of it
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()
    rig.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
