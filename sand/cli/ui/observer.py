"""The board's observer: a child process that observes the fleet when asked.

A refresh of a thousand VMs is a few hundred milliseconds of Python (planning,
status rows) and some C calls that hold the interpreter lock throughout (JSON of
the listing, validation). On a thread of the board's own process that lock is
shared with the thread handling keys, which then waited up to a quarter of a
second; in a process of its own it holds nothing of the board's.

The protocol is the child's stdin and stdout: the board writes a line (the manifest's
path) per refresh; the child answers with one frame, 8 bytes of length and a pickle
of ``("ok", Snapshot)`` or ``("error", message)``. Pickle is safe here: both ends are
this program, run by this user, over a pipe nobody else holds. End of stdin ends the
child, so it never outlives the board. Whatever the child logs goes to the board's
``ui.log``, never to the terminal the board draws on.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, BinaryIO

from sand.cli.ui.fleet import Fleet, Snapshot
from sand.errors import ErrorLayer, SandError
from sand.logs import configure

_LENGTH = 8


class ObserverError(SandError):
    layer = ErrorLayer.UI


def serve(requests: BinaryIO, answers: BinaryIO) -> None:
    """The child's loop: one snapshot (or the error) per request line, until EOF."""
    fleets: dict[str, Fleet] = {}
    for line in requests:
        path = line.decode().rstrip("\n")
        fleet = fleets.setdefault(path, Fleet(Path(path)))
        answer: tuple[str, object]
        try:
            answer = ("ok", fleet.observe())
        except SandError as exc:
            answer = ("error", str(exc))
        except Exception as exc:  # a bug: said on the board, the child lives on
            answer = ("error", f"{type(exc).__name__}: {exc}")
        data = pickle.dumps(answer)
        answers.write(len(data).to_bytes(_LENGTH, "big") + data)
        answers.flush()


class Observer:
    """The board's end: starts the child on first use (again if it died), one request
    at a time."""

    def __init__(self, manifest: Path, log: Path | None = None) -> None:
        self.manifest = manifest
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.mutex = threading.Lock()

    def observe(self) -> Snapshot:
        with self.mutex:
            proc = self._child()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                proc.stdin.write(f"{self.manifest}\n".encode())
                proc.stdin.flush()
                size = int.from_bytes(_read(proc.stdout, _LENGTH), "big")
                kind, value = pickle.loads(_read(proc.stdout, size))
            except (OSError, EOFError) as exc:
                self.close()
                raise ObserverError(f"the observer process ended: {exc}") from None
        if kind == "error":
            raise ObserverError(str(value))
        return value  # type: ignore[no-any-return]

    def _child(self) -> subprocess.Popen[bytes]:
        if self.proc is not None and self.proc.poll() is None:
            return self.proc
        err: IO[bytes] | int = subprocess.DEVNULL
        if self.log is not None:
            err = open(self.log, "ab")  # noqa: SIM115 (the child holds it from here)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sand.cli.ui.observer"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                # Its own session: the terminal's signals are the board's to handle.
                start_new_session=True,
            )
        finally:
            if not isinstance(err, int):
                err.close()
        return self.proc

    def close(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()  # EOF: the child ends after its current refresh
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            proc.kill()  # an observation still hanging on a backend: nothing to lose
            proc.wait()


def _read(stream: IO[bytes], size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            raise EOFError("no answer")
        data += chunk
    return bytes(data)


def main() -> int:
    # The protocol owns the real stdout; anything printed or logged goes to stderr
    # (the board's ui.log).
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    configure("console", "info", stream=sys.stderr)
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt):  # the board is gone
        serve(sys.stdin.buffer, answers)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
