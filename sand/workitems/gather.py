"""Every generator's work items, read once per plan, and what the plan should say of
reading them (a rate limit that kept the last poll's items)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sand.desired.generated import WorkItem, WorkItems
from sand.manifest.generators import GitHubSource
from sand.manifest.models import Manifest
from sand.secrets.resolve import resolve_secrets, reveal
from sand.state.paths import project_dir
from sand.workitems.branches import branch_items
from sand.workitems.github import github_items
from sand.workitems.rest import RestClient


def gather_items(manifest: Manifest, directory: Path) -> tuple[WorkItems, list[str]]:
    """Each generator's items, by generator name, and the notes reading them left.
    ``directory``: where the manifest's relative host paths (a token's file) are."""
    out: dict[str, Sequence[WorkItem]] = {}
    notes: list[str] = []
    for name, gen in manifest.generators.items():
        if gen.branches is not None:
            repo = manifest.repos[gen.branches.repo]
            out[name] = branch_items(str(repo.url), gen.branches.match, generator=name)
        elif gen.github is not None:
            client = github_client(manifest, directory, name, gen.github)
            out[name], said = github_items(gen.github, client, generator=name)
            notes += said
    return out, notes


def github_client(
    manifest: Manifest, directory: Path, generator: str, source: GitHubSource
) -> RestClient:
    """A client of ``source``'s API with its token, keeping its answers per project."""
    token = None
    if source.token is not None:
        values = resolve_secrets(manifest, directory, [source.token])
        token = reveal(values[source.token])
    cache = project_dir(manifest.project) / "generators" / generator
    return RestClient(source.api, token, cache)
