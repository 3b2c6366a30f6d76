"""stdin/stdout <-> TCP relay, run by qemu for each guest connection.

QEMU's ``guestfwd=...-cmd:CMD`` starts CMD once per connection the guest
opens and wires the connection to CMD's stdin/stdout (a ``tcp:`` chardev
target would be a single connection for the VM's whole life, which breaks
git's one-request-per-connection HTTP).  Run as a file, not ``-m``: qemu's
working directory is not the repo.

usage: python3 _relay.py HOST PORT
"""

from __future__ import annotations

import os
import socket
import sys
import threading


def _pump_in(sock: socket.socket) -> None:
    while data := os.read(0, 65536):
        sock.sendall(data)
    # Guest closed its side: half-close so the server sees EOF.
    sock.shutdown(socket.SHUT_WR)


def main() -> int:
    host, port = sys.argv[1], int(sys.argv[2])
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.settimeout(None)
        threading.Thread(target=_pump_in, args=(sock,), daemon=True).start()
        while data := sock.recv(65536):
            os.write(1, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
