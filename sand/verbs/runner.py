"""Running fixed scripts in a guest: the contract the verbs are written against.

A :class:`Runner` runs one *fixed* bash script -- a constant in this package,
never assembled from guest data -- with its data on stdin, and returns the
output bounded by ``limit`` so a hostile guest cannot make the host buffer
gigabytes. :mod:`sand.verbs.guest` implements it over SSH; tests run the very
same scripts against real git on the host through a local runner.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Protocol

from sand.errors import GuestCommandError
from sand.verbs.text import decode, one_line

DEFAULT_LIMIT = 16 << 20
STDERR_TAIL = 4096


@dataclass(frozen=True)
class RunResult:
    exit_status: int  # -1 when the process died of a signal
    stdout: bytes
    stderr: bytes


class Runner(Protocol):
    async def run(
        self, script: str, *, stdin: bytes = b"", limit: int = DEFAULT_LIMIT, timeout: float = 60.0
    ) -> RunResult:
        """Run ``script`` with bash in the guest as its user (HOME is its home)."""
        ...


class StreamReader(Protocol):
    async def read(self, n: int = -1) -> bytes: ...


class OutputTooLarge(GuestCommandError):
    def __init__(self, step: str, limit: int) -> None:
        super().__init__(step, None, f"(output exceeded {limit} bytes; stopped reading)")


async def read_capped(stream: StreamReader, limit: int, step: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while data := await stream.read(1 << 16):
        size += len(data)
        if size > limit:
            raise OutputTooLarge(step, limit)
        chunks.append(data)
    return b"".join(chunks)


async def read_tail(stream: StreamReader, keep: int = STDERR_TAIL) -> bytes:
    tail = b""
    while data := await stream.read(1 << 16):
        tail = (tail + data)[-keep:]
    return tail


def bash_command(script: str) -> str:
    """The command line that runs ``script``: the script is a constant, quoted once."""
    return "exec bash -c " + shlex.quote(script) + " sand"


def failed(step: str, result: RunResult) -> GuestCommandError:
    """A guest error whose text is safe to print (the guest wrote it)."""
    lines = decode(result.stderr).splitlines()[-5:]
    return GuestCommandError(step, result.exit_status, "\n".join(one_line(ln) for ln in lines))


def guest_path_arg(path: str) -> bytes:
    """A checkout path for a script's stdin: ``~``-relative or absolute, NUL-free."""
    if "\0" in path or not (path == "~" or path.startswith(("~/", "/"))):
        raise ValueError(f"guest path {path!r} must be absolute or start with ~/")
    return path.encode() + b"\0"


# Shell prelude every script shares: expand a ~-relative path read from stdin.
EXPAND = r"""
expand() {
	case $1 in
	"~") printf '%s' "$HOME" ;;
	"~/"*) printf '%s/%s' "$HOME" "${1#"~/"}" ;;
	*) printf '%s' "$1" ;;
	esac
}
"""
