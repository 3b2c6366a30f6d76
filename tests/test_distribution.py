"""The name sand is installed under, and every place that installs it: not ``sand`` on
PyPI (an unrelated 2020 package with no ``sand`` command), no placeholder repository,
pipx/uv of a checkout or a wheel as the documented install, an SPDX licence."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALLERS = [
    "docs/ci/github-actions.yml",
    "docs/ci/gitlab-ci.yml",
    "docs/sync.md",
    "docs/systemd/sand-sync.service",
    "docs/quickstart.md",
    "README.md",
]


def test_the_distribution_is_sand_fleet_and_the_command_sand():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == "sand-fleet"
    assert project["scripts"] == {"sand": "sand.cli.main:main"}
    assert project["license"] == "MIT"  # SPDX: the table form stops building in 2027
    # The licence's text ships with it, and PyPI's filters find it.
    assert project["license-files"] == ["LICENSE"]
    assert (ROOT / "LICENSE").read_text().startswith("MIT License\n")
    classifiers = set(project["classifiers"])
    assert {"Typing :: Typed", "Programming Language :: Python :: 3.11"} <= classifiers
    # No licence classifier beside the SPDX expression: setuptools refuses both.
    assert not any(c.startswith("License ::") for c in classifiers)


def test_nothing_installs_the_other_sand_or_points_at_a_placeholder():
    for name in INSTALLERS:
        text = (ROOT / name).read_text()
        # A default spec of plain `sand`, or `sand @ ...`, installs PyPI's other project.
        other_sand = r"""\|\| 'sand'|:-sand\}|['"]sand @|pip install sand\b(?!` (does|is))"""
        assert not re.search(other_sand, text), name
        assert "github.com/you/" not in text and "example.com/sand" not in text, name


def test_pipx_and_uv_of_a_checkout_or_wheel_are_documented():
    quickstart = (ROOT / "docs/quickstart.md").read_text()
    for words in ("pipx install .", "uv tool install .", "pipx install dist/sand_fleet-"):
        assert words in quickstart, words
