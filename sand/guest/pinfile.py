"""sand's ``known_hosts`` as a file: its lines read and written, and a deleted machine's
pins dropped, without the SSH library.

The pins are one host-side trace of each Lima guest sand reached (its incarnation and
boots: ``sand.backends.lima.guest``). Deleting the VM must take them too, so the
backend's delete drops them; it runs in plans' and applies' processes that never load
asyncssh, hence this module apart from :class:`sand.guest.ssh.KnownHosts`, which
reads and writes through the same functions.
"""

from __future__ import annotations

from pathlib import Path

from sand.guest.endpoint import BOOT_MARK
from sand.secrets.files import locked, write_private
from sand.state.paths import state_root
from sand.state.private import read_private

KNOWN_HOSTS_FILE = "known_hosts"

Pins = dict[str, list[str]]  # name -> "type base64" keys


def pins_path() -> Path:
    return state_root() / KNOWN_HOSTS_FILE


def read_pins(path: Path) -> Pins:
    """The file's pins by name; hashed names and ``@cert-authority``/``@revoked`` lines
    (a hand edit) are never read as pins."""
    try:
        text = read_private(path).decode(errors="replace")
    except FileNotFoundError:
        return {}
    out: Pins = {}
    for raw in text.splitlines():
        parts = raw.split()
        if len(parts) < 3 or parts[0].startswith(("#", "@", "|")):
            continue
        for name in parts[0].split(","):  # OpenSSH allows "name1,name2 key"
            out.setdefault(name, []).append(f"{parts[1]} {parts[2]}")
    return out


def write_pins(path: Path, entries: Pins) -> None:
    text = "".join(f"{name} {k}\n" for name in sorted(entries) for k in sorted(entries[name]))
    write_private(path, text.encode())


def is_boot_of(name: str, family: str) -> bool:
    """``name`` pins one boot of the machine ``family`` (``<family>.boot-<token>``)."""
    prefix = family + BOOT_MARK
    return name.startswith(prefix) and name[len(prefix) :].replace("-", "").isdigit()


def forget_machine(family: str, path: Path | None = None) -> int:
    """Drop every pin of the machine ``family`` (its own name and each boot's): it was
    deleted. Returns how many names went."""
    path = path or pins_path()
    if not path.exists():
        return 0
    with locked(path):
        entries = read_pins(path)
        gone = [n for n in entries if n == family or is_boot_of(n, family)]
        for name in gone:
            del entries[name]
        if gone:
            write_pins(path, entries)
    return len(gone)
