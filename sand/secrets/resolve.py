"""Resolve a manifest's secrets on the host, just before they are delivered.

A secret's value exists only in memory here: it is read from a file, an
environment variable or a command's stdout, registered with the log redactor
the moment it is read, and wrapped in :class:`SecretValue` so that printing,
logging or formatting it by accident shows a placeholder. Only the secrets the
VMs being applied use are resolved, so a broken source for some other VM's
secret (a vault you are not logged into) never blocks an apply.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import NoReturn

from sand.desired.spec import DesiredVM
from sand.errors import SecretError
from sand.logs import register_secret
from sand.manifest.content import SecretSource
from sand.manifest.hostsecrets import HostMap, host_secrets_file, load_host_map
from sand.manifest.models import Manifest
from sand.state.private import private_file_problem

COMMAND_TIMEOUT = 30.0
# Shorter values could not be redacted from logs without redacting ordinary
# words too (sand.logs ignores them), so they are refused rather than leaked.
MIN_LENGTH = 4
MAX_LENGTH = 64 << 10
# The most a command's output is read: a value of MAX_LENGTH characters in UTF-8 (up
# to 4 bytes each) and its newline. Past it the command is killed.
MAX_OUTPUT = 4 * MAX_LENGTH + 2


class SecretValue:
    """A resolved secret. ``repr``/``str``/``format`` never show the value."""

    __slots__ = ("_value", "name")

    def __init__(self, name: str, value: str) -> None:
        self.name = name
        self._value = value

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return f"SecretValue({self.name!r}, '[redacted]')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretValue) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> NoReturn:
        # Pickling would write the value wherever the pickle goes (a cache, a
        # multiprocessing queue); nothing in sand needs it.
        raise TypeError("a SecretValue cannot be pickled")


def reveal(value: str | SecretValue) -> str:
    return value.reveal() if isinstance(value, SecretValue) else value


def secret_names(vms: Iterable[DesiredVM]) -> set[str]:
    """The manifest secrets these VMs use: scoped secrets, repo tokens, brokered ones."""
    names: set[str] = set()
    for vm in vms:
        if not vm.provision:
            continue  # sand puts nothing in an unprovisioned guest
        names.update(s.name for s in vm.secrets)
        names.update(r.token_secret for r in vm.repos if r.token_secret)
        names.update(g.secret for g in vm.brokered)  # the broker's, handed to it
    return names


def resolve_secrets(
    manifest: Manifest,
    manifest_dir: str | os.PathLike[str],
    names: Iterable[str],
    *,
    from_repository: bool = False,
    timeout: float = COMMAND_TIMEOUT,
) -> dict[str, SecretValue]:
    """Read the values of ``names``; one SecretError lists every one that failed.

    A secret without a ``from:`` takes its source from the host's ``secrets.yaml`` in
    ``manifest_dir``; with ``from_repository`` every one does, whatever the manifest
    says (``sand sync`` refuses such a manifest before; this is the second lock)."""
    directory = Path(manifest_dir)
    host: HostMap | None = None
    values: dict[str, SecretValue] = {}
    problems: list[str] = []
    for name in sorted(set(names)):
        secret = manifest.secrets.get(name)
        if secret is None:
            problems.append(f"secret {name!r} is not defined in the manifest's secrets")
            continue
        source = None if from_repository else secret.source
        place = ""  # where the host's secrets.yaml gives the source: its problem's place
        if source is None:
            host = load_host_map(directory) if host is None else host
            source = host.sources.get(name)
            place = host.places.get(name, "")
        if source is None:
            problems.append(
                f"secret {name!r} has no source: the manifest only names it, and "
                f"{host_secrets_file(directory)} does not map it"
            )
            continue
        try:
            raw = _read(name, source, directory, timeout)
            value = _check(name, raw)
        except SecretError as exc:
            problems.append(f"{place}: {exc}" if place else str(exc))
            continue
        register_secret(value)
        values[name] = SecretValue(name, value)
    if problems:
        raise SecretError("\n".join(problems))
    return values


def _read(name: str, source: SecretSource, manifest_dir: Path, timeout: float) -> str:
    if source.file is not None:
        return _strip_newline(_read_file(name, _file_path(source.file, manifest_dir)))
    if source.env is not None:
        value = os.environ.get(source.env)
        if value is None:
            raise SecretError(f"secret {name!r}: environment variable {source.env} is not set")
        return value
    assert source.command is not None  # the model requires exactly one source
    return _strip_newline(_run(name, source.command, timeout))


def _file_path(path: str, manifest_dir: Path) -> Path:
    expanded = Path(path).expanduser()
    return expanded if expanded.is_absolute() else manifest_dir / expanded


def _read_file(name: str, path: Path) -> str:
    try:
        info = path.stat()
    except OSError as exc:
        raise SecretError(f"secret {name!r}: cannot read {path}: {exc.strerror}") from None
    problem = private_file_problem(path)
    if problem:
        raise SecretError(f"secret {name!r}: {path} {problem}")
    if info.st_size > MAX_LENGTH:
        raise SecretError(f"secret {name!r}: {path} is larger than {MAX_LENGTH} bytes")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SecretError(f"secret {name!r}: cannot read {path}: {exc.strerror}") from None
    return _decode(name, data, str(path))


def _run(name: str, argv: list[str], timeout: float) -> str:
    # An argv list and no shell: nothing in the manifest is ever parsed by a shell.
    # stdout is the value, so it is never quoted in an error; stderr is not even read
    # (a failing password manager may echo what it was given).
    program = argv[0]
    try:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
    except FileNotFoundError:
        raise SecretError(f"secret {name!r}: command {program!r} was not found") from None
    except PermissionError:
        raise SecretError(f"secret {name!r}: command {program!r} is not executable") from None
    try:
        data = _read_capped(name, program, proc, time.monotonic() + timeout, timeout)
    finally:
        if proc.poll() is None:
            proc.kill()  # over the cap or the time: it is not waited for any longer
        proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()
    if proc.returncode != 0:
        raise SecretError(
            f"secret {name!r}: command {program!r} failed with exit status {proc.returncode} "
            "(its output is not shown: it may contain the value)"
        )
    return _decode(name, data, f"the output of {program!r}")


def _read_capped(
    name: str, program: str, proc: subprocess.Popen[bytes], deadline: float, timeout: float
) -> bytes:
    """The command's stdout, read as it comes and never more than MAX_OUTPUT bytes:
    a command that prints without end costs a pipe's worth of memory, not its output."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    late = SecretError(f"secret {name!r}: command {program!r} did not finish within {timeout:g}s")
    chunks: list[bytes] = []
    size = 0
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                raise late
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            size += len(chunk)
            if size > MAX_OUTPUT:
                raise SecretError(
                    f"secret {name!r}: command {program!r} printed more than {MAX_OUTPUT} bytes; "
                    "it was stopped (a value is at most "
                    f"{MAX_LENGTH} characters)"
                )
            chunks.append(chunk)
    try:
        proc.wait(max(deadline - time.monotonic(), 0.0))
    except subprocess.TimeoutExpired:
        raise late from None
    return b"".join(chunks)


def _decode(name: str, data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(f"secret {name!r}: {what} is not UTF-8 text") from None


def _strip_newline(value: str) -> str:
    if value.endswith("\r\n"):
        return value[:-2]
    return value[:-1] if value.endswith("\n") else value


def _check(name: str, value: str) -> str:
    if not value:
        raise SecretError(f"secret {name!r} is empty")
    if len(value) < MIN_LENGTH:
        raise SecretError(
            f"secret {name!r} is shorter than {MIN_LENGTH} characters, too short to keep out of "
            "logs"
        )
    if len(value) > MAX_LENGTH:
        raise SecretError(f"secret {name!r} is longer than {MAX_LENGTH} characters")
    if "\x00" in value:
        raise SecretError(f"secret {name!r} contains a NUL character")
    return value


def values_for(vm: DesiredVM, values: Mapping[str, str | SecretValue]) -> dict[str, str]:
    """The plain values one VM needs, keyed by secret name; a missing one is an error."""
    needed = secret_names([vm])
    missing = sorted(needed - set(values))
    if missing:
        raise SecretError(
            f"VM {vm.name!r} needs secrets that were not resolved: {', '.join(missing)}"
        )
    out = {name: reveal(values[name]) for name in sorted(needed)}
    for value in out.values():
        register_secret(value)
    return out
