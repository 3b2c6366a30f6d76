"""Fixtures for the Lima backend tests: the limactl stand-in first on PATH, a backend
pointed at its LIMA_HOME, a journal, and manifests in text."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from sand.backends.lima import LimaBackend, make_lima_backend
from sand.desired import DesiredState, DesiredVM, build_desired
from sand.desired.spec import DesiredBase
from sand.guest.endpoint import GuestEndpoint
from sand.manifest import parse_manifest
from sand.manifest.backends import LimaConfig
from sand.observed import ObservedBase
from sand.state.journal import Journal
from tests.backends.lima.sshd_rig import sshd  # noqa: F401  (the remote-host fixture)
from tests.limactl_standin import StandIn

PROJECT = "demo"

MANIFEST = """\
apiVersion: sand/v1
project: demo
backends:
  laptop:
    type: lima
defaults:
  image: debian-12
  cpus: 2
  memory: 4GiB
  disk: 20GiB
vms:
{vms}
"""


def desired(vms: str = "  - name: vm1\n", project: str = PROJECT) -> DesiredState:
    text = MANIFEST.format(vms=vms).replace("project: demo", f"project: {project}")
    return build_desired(parse_manifest(text), bundle_digest="bundle-v1")


def one(vms: str = "  - name: vm1\n") -> DesiredVM:
    return desired(vms).vms[0]


# A golden image the VMs of ``golden_desired`` are made from: the only base sand clones
# VMs from on Lima (``sand.backends.lima.create`` says why there is no other).
IMAGES = "images:\n  wb:\n    from: debian-12\n    packages: [jq]\n"


def golden_desired(vms: str = "  - name: vm1\n", project: str = PROJECT) -> DesiredState:
    """Like ``desired``, with the golden image ``wb`` as the VMs' default image."""
    text = MANIFEST.format(vms=vms).replace("project: demo", f"project: {project}")
    text = text.replace("  image: debian-12\n", "  image: wb\n").replace(
        "vms:\n", IMAGES + "vms:\n"
    )
    return build_desired(parse_manifest(text))


async def build_golden(backend: LimaBackend, vm: DesiredVM, journal: Journal) -> ObservedBase:
    """Build ``vm``'s golden base (its provisioning a no-op: the backend's side is what
    these tests are about)."""

    async def provision(base: DesiredBase, endpoint: GuestEndpoint) -> None:
        del base, endpoint

    assert vm.base is not None
    return await backend.build_base(vm.base, provision, journal)


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StandIn:
    s = StandIn.create(tmp_path / "standin")
    monkeypatch.setenv("PATH", s.path)
    monkeypatch.setenv("LIMA_HOME", str(s.lima_home))
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    s.configure(require_tty_false=True, host_user="claude")
    return s


@pytest.fixture
def journal(tmp_path: Path) -> Journal:
    return Journal(tmp_path / "journal.jsonl")


MakeBackend = Callable[..., LimaBackend]


@pytest.fixture
async def make_backend(standin: StandIn, tmp_path: Path) -> AsyncIterator[MakeBackend]:
    made: list[LimaBackend] = []

    def make(project: str = PROJECT, **config: Any) -> LimaBackend:
        cfg = LimaConfig(type="lima", lima_home=str(standin.lima_home), **config)
        backend = make_lima_backend("laptop", cfg, project=project, manifest_dir=tmp_path)
        assert isinstance(backend, LimaBackend)
        made.append(backend)
        return backend

    yield make
    for b in made:
        await b.close()


@pytest.fixture
async def backend(make_backend: MakeBackend) -> LimaBackend:
    return make_backend()
