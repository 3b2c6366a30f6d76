"""One OS file lock per project, so two applies never run at once.

``flock`` is released by the kernel when the holder dies, so a SIGKILLed
apply never leaves a lock that needs a manual unlock (Terraform's
force-unlock problem). The file records who holds it, for the error message.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path
from types import TracebackType

from sand.errors import StateError
from sand.state.private import open_private


class ProjectLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, *, wait: float = 0.0) -> None:
        fd = open_private(self.path, os.O_RDWR)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = self.holder()
                    os.close(fd)
                    raise StateError(
                        f"another sand run holds the lock {self.path}"
                        + (f" ({holder})" if holder else "")
                    ) from None
                time.sleep(0.1)
        info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join(os.path.basename(a) for a in sys.argv[:2]),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(info).encode(), 0)
        self._fd = fd

    def holder(self) -> str:
        try:
            info = json.loads(self.path.read_text() or "{}")
        except (OSError, ValueError):
            return ""
        return f"pid {info.get('pid')} on {info.get('host')} since {info.get('since')}"

    def release(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> ProjectLock:
        self.acquire()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
