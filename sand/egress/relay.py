"""The broker's forward for a restricted Lima guest: one process per connection.

A guest whose net0 is ``restrict=on`` cannot reach the host's loopback, where the
project's credential broker listens (docs/credentials.md). The QEMU shim gives it a
forward of its own (``sand.broker.access.RESTRICTED_LIMA_ADDRESS``), which runs this for
each connection, its stdin and stdout the connection: it reads where the broker listens
now (its ``run.json``: the broker's port changes when it restarts) and relays the bytes.
The broker still checks each request's credential; this only carries them.

Usage: ``python -m sand.egress.relay POLICY_FILE`` (the VM's policy file names its project).
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path

from sand.broker.store import broker_dir, read_running
from sand.egress.policy import read_policy
from sand.egress.proxy import CONNECT_TIMEOUT, command, relay

LOOPBACK = "127.0.0.1"


def serve(policy_path: Path, fd_in: int = 0, fd_out: int = 1) -> int:
    try:
        project = read_policy(policy_path).project
    except ValueError:
        return 1
    running = read_running(broker_dir(project))
    if running is None or LOOPBACK not in running.ports:
        return 1  # no broker listens for Lima guests: the connection just closes
    try:
        upstream = socket.create_connection(
            (LOOPBACK, running.ports[LOOPBACK]), timeout=CONNECT_TIMEOUT
        )
    except OSError:
        return 1
    with upstream:
        relay(fd_in, fd_out, upstream)
    return 0


if __name__ == "__main__":
    sys.exit(command(sys.argv, "sand.egress.relay", serve))
