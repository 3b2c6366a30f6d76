"""The newcomer pages stay true: every manifest they show passes `sand validate`, and every
`sand ...` command they write parses with sand's own argument parser (a flag that was
renamed or removed fails here, not in a reader's terminal).

Fast and local: the manifests are loaded as `sand validate` loads them, nothing is
contacted, no command is run.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from sand.cli.main import build_parser
from sand.cli.parser import subcommands
from sand.manifest import load_manifest

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ("quickstart.md", "troubleshooting.md", "plan.md", "ui.md", "sync.md", "generators.md")

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`(sand [^`]+)`")


def _blocks(page: str, lang: str) -> list[str]:
    text = (DOCS / page).read_text()
    return [body for kind, body in FENCE.findall(text) if kind == lang]


def _manifests() -> list[tuple[str, int, str]]:
    return [
        (page, i, body) for page in PAGES for i, body in enumerate(_blocks(page, "yaml"), start=1)
    ]


def _commands() -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    for page in PAGES:
        text = (DOCS / page).read_text()
        for body in _blocks(page, "console") + _blocks(page, "sh"):
            for line in body.splitlines():
                if line.startswith("$ sand "):
                    found.append((page, line[2:].split("  #")[0].strip()))
        prose = FENCE.sub("", text)
        found += [(page, cmd) for cmd in INLINE.findall(prose)]
    return found


def test_the_pages_show_manifests_and_commands() -> None:
    # The extraction itself must find something, or the checks below prove nothing.
    assert len([m for m in _manifests() if m[0] == "quickstart.md"]) >= 2
    assert len([m for m in _manifests() if m[0] == "troubleshooting.md"]) >= 1
    assert len([c for c in _commands() if c[0] == "quickstart.md"]) >= 10


@pytest.mark.parametrize(
    ("page", "index", "body"), _manifests(), ids=[f"{m[0]}-{m[1]}" for m in _manifests()]
)
def test_every_manifest_in_the_docs_validates(
    page: str, index: int, body: str, tmp_path: Path
) -> None:
    file = tmp_path / "sand.yaml"
    file.write_text(body)
    loaded = load_manifest(file)  # raises ManifestError, located, when a doc is wrong
    assert loaded.manifest.vms, f"{page} yaml block {index} declares no VM"


@pytest.mark.parametrize(("page", "command"), _commands())
def test_every_command_in_the_docs_parses(page: str, command: str) -> None:
    words = shlex.split(command.split(" > ")[0])[1:]  # a redirect is the shell's
    parser = build_parser()
    if words in (["--version"], ["--help"]):
        return
    if len(words) == 1:  # prose naming a verb ("`sand destroy` keeps ..."), not a command line
        assert words[0] in subcommands(parser), f"{page}: no verb {words[0]!r}"
        return
    try:
        parser.parse_args(words)
    except SystemExit as exc:  # argparse's usage error
        pytest.fail(f"{page}: `{command}` is not a valid sand command line (exit {exc.code})")


LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {_slug(m) for m in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}


@pytest.mark.parametrize("page", [*PAGES, "../README.md", "safety.md", "backends/proxmox.md"])
def test_every_local_link_of_the_newcomer_pages_resolves(page: str) -> None:
    source = (DOCS / page).resolve()
    broken = []
    for target in LINK.findall(FENCE.sub("", source.read_text())):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        file = (source.parent / path).resolve() if path else source
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in _anchors(file)):
            broken.append(target)
    assert not broken, f"{page}: links that lead nowhere: {broken}"
