"""A listing that forgets is not believed: check it against what this host recorded.

The inventory (``sand.state.inventory``, written by ``sand.apply.recorded``) holds
every VM apply saw or made. A recorded VM the listing does not show is checked
directly by its id (the backend's ``vanished``): confirmed gone (id free, directory
absent, or another VM on the id), it is forgotten and may be made again; still there
(or not checkable), the backend is *unknown* for the run, so nothing is created in
its place or pruned, and the reason names the VM. A listing that shows none of a
backend's recorded VMs is therefore only believed when every one of them is
confirmed gone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from sand.backends.protocol import Backend
from sand.errors import SandError
from sand.observed import Observation, RecordedVM
from sand.state.inventory import inventory_path, load_inventory


async def check_recorded(
    project: str,
    backends: Mapping[str, Backend],
    observations: Mapping[str, Observation],
    *,
    settling: Mapping[str, set[str]] | None = None,
) -> dict[str, Observation]:
    """``observations`` with each backend whose listing forgot a VM made unknown.

    ``settling``: per backend, identities a pending journal entry is about (recovery
    decides those, not this check)."""
    out = dict(observations)
    recorded: dict[str, list[RecordedVM]] = {}
    for rec in load_inventory(project):
        recorded.setdefault(rec.backend, []).append(rec)
    for name, records in recorded.items():
        obs, backend = out.get(name), backends.get(name)
        if obs is None or backend is None or obs.unknown_reason:
            continue
        listed = {vm.identity for vm in obs.vms}
        skip = (settling or {}).get(name, set())
        missing = [r for r in records if r.identity not in listed and r.identity not in skip]
        if not missing:
            continue
        try:
            answers = await backend.vanished(missing)
        except SandError as exc:
            answers = {
                r.identity: f"VM {r.identity} ({r.name}) could not be checked: {exc}"
                for r in missing
            }
        still = [why for why in answers.values() if why]
        if not still:
            continue  # every missing one is confirmed gone: forgotten
        head = ""
        if len(missing) == len(records):
            head = f"the listing shows none of the {len(records)} VMs sand recorded here; "
        hint = (
            f" (a VM that left this backend on purpose: remove it from {inventory_path(project)})"
        )
        out[name] = replace(obs, unknown_reason=head + "; ".join(still) + hint)
    return out
