"""pytest fixtures serving a seeded fakepve. Use from a conftest::

    from tests.fakepve_rig.fixtures import *  # noqa: F403

or list ``"tests.fakepve_rig.fixtures"`` in the root conftest's ``pytest_plugins``.

``fakepve_server`` (function)
    A started :class:`~tests.fakepve_rig.rig.FakePveRig`: node ``pve1``, storage
    ``local-lvm`` in pool ``sand``, template 9000 ``debian-13``, least-privilege
    token ``sand@pve!ci`` (``.token_file``, mode 0600), an SSH identity
    (``.identity``), time scale 0. Options by marker:
    ``@pytest.mark.fakepve_rig(nodes=("pve1", "pve2"), time_scale=0.01, acl="root",
    shared_storage=True, pve_version=8)``. Every rig serves fakepve behind the fidelity
    layer (``tests/fakepve_rig/README.md``); ``pve_version`` defaults to
    ``$SAND_PVE_VERSION`` or 9.
``fakepve_factory`` (function)
    ``make(**options) -> FakePveRig`` for more than one fake in a test; all are
    stopped at the end.
``fakepve_rig_pki`` (session)
    (certfile, keyfile) every fake serves; the certificate is its own CA.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.fakepve_rig.rig import HOST, FakePveRig

MakeRig = Callable[..., FakePveRig]
# What ``from tests.fakepve_rig.fixtures import *`` brings into a conftest (the hook
# registers the fakepve_rig marker).
__all__ = ["fakepve_factory", "fakepve_rig_pki", "fakepve_server", "pytest_configure"]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "fakepve_rig(nodes=, time_scale=, acl=, shared_storage=, pve_version=): options of "
        "fakepve_server",
    )


@pytest.fixture(scope="session")
def fakepve_rig_pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    from fakepve.certs import make_cert

    certfile, keyfile, _ = make_cert(str(tmp_path_factory.mktemp("fakepve-pki")), hosts=(HOST,))
    return certfile, keyfile


@pytest.fixture
def fakepve_factory(fakepve_rig_pki: tuple[str, str], tmp_path: Path) -> Iterator[MakeRig]:
    made: list[FakePveRig] = []

    def make(**options: object) -> FakePveRig:
        rig = FakePveRig(fakepve_rig_pki, tmp_path / f"fakepve-{len(made)}", **options)  # type: ignore[arg-type]
        made.append(rig)
        return rig

    yield make
    for rig in made:
        rig.stop()


@pytest.fixture
def fakepve_server(request: pytest.FixtureRequest, fakepve_factory: MakeRig) -> FakePveRig:
    marker = request.node.get_closest_marker("fakepve_rig")
    options = dict(marker.kwargs) if marker else {}
    return fakepve_factory(**options)
