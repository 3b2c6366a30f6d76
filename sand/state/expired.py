"""The VMs sand deleted because their ``expires:`` passed (``expired.json``, 0600).

An absolute expiry says by itself that a VM is past its time. A duration counts from
the VM's creation, which only the VM recorded: once the VM is gone, this file is what
keeps the next plan from making it again. An entry holds while the manifest's
``expires:`` for that VM is the one it expired under; change it (or remove it) and
the VM is made again. Names and times only. This host's record: another host that
did not see the expiry makes the VM again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from sand.state.paths import project_dir
from sand.state.private import read_rows, write_rows

FORMAT = 1
Key = tuple[str, str]  # (backend, vm name)


@dataclass(frozen=True)
class ExpiredVM:
    backend: str
    name: str
    expires: str  # the canonical expires: it was deleted under
    at: float  # when it expired (epoch seconds)

    @property
    def key(self) -> Key:
        return self.backend, self.name


def _path(project: str) -> Path:
    return project_dir(project) / "expired.json"


def load_expired(project: str) -> dict[Key, ExpiredVM]:
    out: dict[Key, ExpiredVM] = {}
    for item in read_rows(_path(project), FORMAT):
        try:
            vm = ExpiredVM(
                str(item["backend"]), str(item["name"]), str(item["expires"]), float(item["at"])
            )
        except (KeyError, TypeError, ValueError):
            continue
        out[vm.key] = vm
    return out


def save_expired(project: str, records: Mapping[Key, ExpiredVM] | Iterable[ExpiredVM]) -> None:
    rows = records.values() if isinstance(records, Mapping) else records
    write_rows(
        _path(project),
        FORMAT,
        [
            {"backend": r.backend, "name": r.name, "expires": r.expires, "at": r.at}
            for r in sorted(rows, key=lambda r: r.key)
        ],
    )
