"""Every generator's work items, read once per plan, and what the plan should say of
reading them (a rate limit that kept the last poll's items)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sand.desired.generated import WorkItem, WorkItems
from sand.manifest.generators import DEFAULT_API, GitHubSource
from sand.manifest.models import Manifest
from sand.secrets.resolve import resolve_secrets, reveal
from sand.state.paths import project_dir
from sand.workitems.branches import WorkItemError, branch_items
from sand.workitems.github import github_items
from sand.workitems.rest import RestClient


def gather_items(
    manifest: Manifest, directory: Path, *, from_repository: bool = False
) -> tuple[WorkItems, list[str]]:
    """Each generator's items, by generator name, and the notes reading them left.
    ``directory``: where the manifest's relative host paths (a token's file) are;
    ``from_repository``: the manifest is ``sand sync``'s, its secrets the host's."""
    out: dict[str, Sequence[WorkItem]] = {}
    notes: list[str] = []
    for name, gen in manifest.generators.items():
        if gen.branches is not None:
            repo = manifest.repos[gen.branches.repo]
            token = _secret(manifest, directory, repo.token, from_repository)
            scratch = project_dir(manifest.project) / "generators"
            url, match = str(repo.url), gen.branches.match
            out[name] = branch_items(url, match, generator=name, token=token, scratch=scratch)
        elif gen.github is not None:
            client = github_client(manifest, directory, name, gen.github, from_repository)
            out[name], said = github_items(gen.github, client, generator=name)
            notes += said
    return out, notes


def github_client(
    manifest: Manifest,
    directory: Path,
    generator: str,
    source: GitHubSource,
    from_repository: bool = False,
) -> RestClient:
    """A client of ``source``'s API with its token, keeping its answers per project."""
    cache = project_dir(manifest.project) / "generators" / generator
    if from_repository and source.token is not None and source.api != DEFAULT_API:
        # Whoever can commit would choose where the host's token goes.
        raise WorkItemError(
            f"generator {generator}: a manifest sand sync follows sends a token to "
            f"{DEFAULT_API} only, not to {source.api}"
        )
    token = _secret(manifest, directory, source.token, from_repository)
    return RestClient(source.api, token, cache)


def _secret(
    manifest: Manifest, directory: Path, name: str | None, from_repository: bool
) -> str | None:
    """The value of secret ``name`` (None for None), read as every secret is."""
    if name is None:
        return None
    values = resolve_secrets(manifest, directory, [name], from_repository=from_repository)
    return reveal(values[name])
