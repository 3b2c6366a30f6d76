"""The quick start's Proxmox path: token, pool, template and a first plan, with a
manifest whose backend holds only the keys a person must write (what sand cannot
default), and which passes ``sand validate``'s loader."""

from __future__ import annotations

import re
from pathlib import Path

from sand.manifest import load_manifest
from sand.manifest.backends import ProxmoxConfig

PAGE = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"


def section() -> str:
    text = PAGE.read_text()
    found = re.search(r"^## \d+\. Or: a Proxmox VE cluster\n(.*?)^## ", text, re.M | re.S)
    assert found, "the quick start has no Proxmox section"
    return found.group(1)


def test_the_proxmox_path_covers_token_pool_template_and_first_plan():
    body = section()
    for words in (
        "pveum pool add sand",
        "pveum user token add",
        "pve.token",
        "sand template build",
        "$ sand doctor",
        "$ sand plan",
        "Plan: 1 to add",
    ):
        assert words in body, words


def test_its_manifest_names_only_what_sand_cannot_default(tmp_path):
    (block,) = re.findall(r"```yaml\n(.*?)```", section(), re.S)
    path = tmp_path / "sand.yaml"
    path.write_text(block)
    manifest = load_manifest(path).manifest
    (backend,) = manifest.backends.values()
    assert isinstance(backend, ProxmoxConfig)
    written = set(backend.model_fields_set)
    # node (or nodes: exactly one is required); ca_file, the one optional key worth
    # writing: without it TLS goes unverified.
    required = {n for n, f in ProxmoxConfig.model_fields.items() if f.is_required()} | {"node"}
    assert required <= written <= required | {"ca_file"}, written ^ required
