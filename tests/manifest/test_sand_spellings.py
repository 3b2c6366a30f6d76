"""``pool:NAME`` and ``fork:VM`` are how a plan shows a VM claiming a pool's spare and
a fork, never images a manifest may name: ``image: 'pool:warm'`` validated, then was
refused at plan. Refused by ``sand validate`` at the value, with the right spelling."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.helpers import Sand

MANIFEST = """\
apiVersion: sand/v1
project: demo
backends:
  here: {{type: lima}}
defaults: {{backend: here, image: debian-12}}
pools:
  warm: {{warm: 1}}
vms:
  - name: a
  - name: b
    {key}: '{value}'
"""


@pytest.mark.parametrize(
    ("key", "value", "told"),
    [
        ("image", "pool:warm", "a VM takes a spare of a pool with `pool: warm` (and no image)"),
        ("image", "fork:a", "a fork is declared with `from: {vm: a}` (and no image)"),
    ],
)
def test_a_plan_spelling_as_an_image_is_refused_at_validate(
    tmp_path: Path, key: str, value: str, told: str
) -> None:
    file = tmp_path / "sand.yaml"
    file.write_text(MANIFEST.format(key=key, value=value))
    done = Sand(tmp_path).run("validate", str(file))
    assert done.returncode == 1
    expected = f"{file}:11:{len(key) + 7}: vms[1].{key}: {value!r} is not an image: {told}"
    assert expected in done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_the_right_spellings_validate(tmp_path: Path) -> None:
    file = tmp_path / "sand.yaml"
    text = MANIFEST.format(key="pool", value="warm") + "  - name: c\n    from: {vm: a}\n"
    file.write_text(text)
    done = Sand(tmp_path).run("validate", str(file))
    assert done.returncode == 0, done.stdout + done.stderr
