"""The VMs sand put to sleep (``asleep.json``, 0600): for idle, or by ``sand sleep``.

The VM carries its own mark of the sleep (``sand.observed.SleepMark``: a PVE tag, a
Lima sidecar), which every host reads; this host's record is read only for a VM with
no mark (put to sleep by a sand from before the marks): per VM it put to sleep, the
VM's identity, how and since when; the plan reads it (``sand.plan.idle.asleep_of``)
and a wake forgets it. Names and times only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from sand.state.paths import project_dir
from sand.state.private import read_rows, write_rows

FORMAT = 1
Key = tuple[str, str]  # (backend, vm name)


@dataclass(frozen=True)
class SleepRecord:
    backend: str
    name: str
    identity: str
    how: str  # "suspended" | "stopped"
    since: float  # epoch seconds
    by: str = "idle"  # "idle" | "person"

    @property
    def key(self) -> Key:
        return self.backend, self.name


def _path(project: str) -> Path:
    return project_dir(project) / "asleep.json"


def load_asleep(project: str) -> dict[Key, SleepRecord]:
    out: dict[Key, SleepRecord] = {}
    for item in read_rows(_path(project), FORMAT):
        try:
            rec = SleepRecord(
                str(item["backend"]),
                str(item["name"]),
                str(item["identity"]),
                str(item["how"]),
                float(item["since"]),
                str(item.get("by") or "idle"),
            )
        except (KeyError, TypeError, ValueError):
            continue
        out[rec.key] = rec
    return out


def save_asleep(project: str, records: Mapping[Key, SleepRecord]) -> None:
    rows = sorted(records.values(), key=lambda r: r.key)
    write_rows(_path(project), FORMAT, [asdict(r) for r in rows])


def remember_asleep(project: str, record: SleepRecord) -> None:
    records = load_asleep(project)
    records[record.key] = record
    save_asleep(project, records)


def forget_asleep(project: str, backend: str, name: str) -> None:
    records = load_asleep(project)
    if records.pop((backend, name), None) is not None:
        save_asleep(project, records)
