"""``pins.yaml``: the example in docs/sync.md is a valid one, and a token's allowed
repositories are matched at a path boundary, never by string prefix."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sand.errors import ManifestError
from sand.manifest.pins import load_pins, url_within

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sync.md"


def test_the_documented_pins_file_loads(tmp_path) -> None:
    (block,) = re.findall(r"```text\n(# <host-dir>/pins.yaml.*?)```", DOCS.read_text(), re.S)
    (tmp_path / "pins.yaml").write_text(block)
    pins = load_pins(tmp_path)
    assert pins.backends["pve"].host == "pve.example.org"
    assert pins.backends["build"].ssh is not None and pins.backends["build"].ssh.user == "sand"
    assert pins.tokens == {"GITHUB_TOKEN": ["https://github.com/acme/"]}


def test_a_repository_lies_under_a_prefix_only_at_a_path_boundary() -> None:
    prefix = "https://github.com/acme"
    assert url_within("https://github.com/acme/app.git", prefix)
    assert url_within("https://github.com:443/acme/app.git", prefix)
    assert url_within("git@github.com:acme/app.git", "ssh://git@github.com/acme/")
    for elsewhere in (
        "https://github.com/acme-evil/app.git",
        "https://github.com.evil.org/acme/app.git",
        "http://github.com/acme/app.git",
        "https://github.com:8443/acme/app.git",
        "https://evil.org/github.com/acme/app.git",
    ):
        assert not url_within(elsewhere, prefix), elsewhere


def test_a_broken_pin_is_refused_at_its_line_in_the_hosts_file(tmp_path) -> None:
    file = tmp_path / "pins.yaml"
    file.write_text("backends:\n  pve:\n    host: pve.lan\n    prot: 8006\n  lima: {}\n")
    with pytest.raises(ManifestError) as err:
        load_pins(tmp_path)
    told = str(err.value)
    assert f"{file}:4:5: unknown key 'prot'" in told
    assert f"{file}:5:9: backends.lima: pin exactly one of 'host' (Proxmox) or 'ssh'" in told


PVE_MANIFEST = """\
apiVersion: sand/v1
project: demo
backends:
  pve:
    type: proxmox
    host: pve.example.org
    node: pve1
    pool: sand
    storage: local-lvm
    template: debian-12-cloud
    token_file: pve.token
    identity: id_ed25519
    egress_proxy: 10.20.0.1:3128
vms:
  - name: a
    backend: pve
"""


def test_the_egress_proxy_listens_only_where_the_host_pins_it(tmp_path) -> None:
    # The manifest's author must not choose where the sync host listens.
    from sand.manifest.loader import load_manifest
    from sand.manifest.pins import pin_findings

    (tmp_path / "sand.yaml").write_text(PVE_MANIFEST)
    loaded = load_manifest(tmp_path / "sand.yaml")
    pins = tmp_path / "pins.yaml"
    pins.write_text("backends:\n  pve: {host: pve.example.org}\n")
    ((at, told),) = pin_findings(loaded, tmp_path)
    assert at == ("backends", "pve", "egress_proxy")
    assert told.startswith("10.20.0.1:3128 is not where the host lets backend pve's guests")
    pins.write_text("backends:\n  pve: {host: pve.example.org, egress_proxy: '10.20.0.1:3128'}\n")
    assert pin_findings(loaded, tmp_path) == []
