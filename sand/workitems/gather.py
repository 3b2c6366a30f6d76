"""Every generator's work items, read once per plan."""

from __future__ import annotations

from collections.abc import Sequence

from sand.desired.generated import WorkItem, WorkItems
from sand.manifest.models import Manifest
from sand.workitems.branches import branch_items


def gather_items(manifest: Manifest) -> WorkItems:
    """Each generator's items, by generator name (empty when there is none)."""
    out: dict[str, Sequence[WorkItem]] = {}
    for name, gen in manifest.generators.items():
        if gen.branches is not None:
            repo = manifest.repos[gen.branches.repo]
            out[name] = branch_items(str(repo.url), gen.branches.match, generator=name)
    return out
