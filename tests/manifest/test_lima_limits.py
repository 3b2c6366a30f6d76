"""What Lima's own validation (``limayaml.Validate``) refuses, sand refuses first, located."""

from __future__ import annotations

import pytest

from sand.errors import ManifestError
from sand.manifest import parse_manifest
from tests.manifest.test_hostile import BASE

DEV = "  - name: dev\n    backend: laptop\n"


def problems(ports: str) -> list[str]:
    with pytest.raises(ManifestError) as info:
        parse_manifest(BASE.replace(DEV, DEV + f"    ports: {ports}\n"), "m.yaml")
    return [str(p) for p in info.value.problems]


def test_guest_port_22_alone_is_a_located_error() -> None:
    got = problems("[{guest: 22}]")
    assert (
        "m.yaml:38:21: vms[0].ports[0].guest: port 22 is SSH's, which Lima keeps for "
        "itself and refuses to forward" in got
    )


@pytest.mark.parametrize(
    ("ports", "column"), [("[{guest: 8022, host: 22}]", 33), ("[{guest: 22, host: 8022}]", 21)]
)
def test_port_22_on_either_side_is_refused(ports: str, column: int) -> None:
    (got,) = problems(ports)
    assert got.startswith(f"m.yaml:38:{column}: vms[0].ports[0].")
    assert "port 22" in got


def test_ports_next_to_22_are_fine() -> None:
    text = BASE.replace(DEV, DEV + "    ports: [{guest: 21, host: 23}]\n")
    assert [(p.guest, p.host) for p in parse_manifest(text).vms[0].ports] == [(21, 23)]
