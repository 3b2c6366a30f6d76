"""pytest fixtures for the real-guest rig.  Use from any conftest with::

    pytest_plugins = ["tests.rig.fixtures"]

Fixtures:

``rig_rootfs`` (session)
    Path of the tree netns guests run on: the cached Debian rootfs with sand's
    workbench installed (:mod:`tests.rig.workbench`; built on first use, a few
    minutes), as on a prepared image: provisioning finds it in place.
``bare_rootfs`` (session)
    Path of the plain debootstrap rootfs, without the workbench.
``netns_guest`` (function)
    A factory: ``make_guest(user="claude", bare=False) -> NetnsGuest``, started
    and ready for SSH; every guest it made is stopped when the test ends.
    ``bare=True`` runs it on the plain rootfs (pair it with ``apt_mirror``).
``apt_mirror`` (function)
    A started :class:`AptMirror` serving every .deb the workbench needs on
    top of the plain rootfs; ``guest_uses_mirror(guest, mirror)`` points a
    guest's apt at it.
``git_server`` (function)
    A started :class:`GitServer` with a random token (``git_server.token``).
``qemu_guest`` (session)
    One booted :class:`QemuGuest` shared by the session (booting under TCG
    costs tens of seconds, so tests share it and must not break it).

Off CI the fixtures skip with the reason when the machine can't host guests
(not root, a tool missing).  With ``SAND_RIG_REQUIRED`` (``.ci/run`` sets it) or
``CI`` set, the same condition fails the test instead: a rig that silently skips
everything there proves nothing (:mod:`tests.required`).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.required import missing
from tests.rig._util import missing_tools
from tests.rig.gitserver import GitServer
from tests.rig.guest import REQUIRED_TOOLS as NETNS_TOOLS
from tests.rig.guest import NetnsGuest, cleanup_stale
from tests.rig.qemu import REQUIRED_TOOLS as QEMU_TOOLS
from tests.rig.qemu import QemuGuest, build_image, cleanup_stale_qemu
from tests.rig.rootfs import ensure_rootfs
from tests.rig.workbench import AptMirror, ensure_workbench

MakeGuest = Callable[..., NetnsGuest]


def _unavailable(tools: tuple[str, ...]) -> None:
    reason = ""
    if os.geteuid() != 0:
        reason = "the sand rig needs root (netns, mounts, chroot)"
    else:
        absent = missing_tools(tools)
        if absent:
            reason = f"the sand rig needs {', '.join(absent)} (run .ci/rig-setup.sh)"
    if reason:
        missing(reason)


@pytest.fixture(scope="session")
def bare_rootfs() -> Path:
    _unavailable((*NETNS_TOOLS, "debootstrap"))
    # Leftovers of a crashed earlier run (only those whose owner is dead).
    cleanup_stale()
    cleanup_stale_qemu()
    return ensure_rootfs()


@pytest.fixture(scope="session")
def rig_rootfs(bare_rootfs: Path) -> Path:
    return ensure_workbench().tree


@pytest.fixture
def netns_guest(rig_rootfs: Path, bare_rootfs: Path) -> Iterator[MakeGuest]:
    made: list[NetnsGuest] = []

    def make_guest(user: str = "claude", *, bare: bool = False, **kwargs: object) -> NetnsGuest:
        rootfs = bare_rootfs if bare else rig_rootfs
        guest = NetnsGuest(user, rootfs=rootfs, **kwargs)  # type: ignore[arg-type]
        made.append(guest)
        return guest.start()

    yield make_guest
    errors: list[BaseException] = []
    for guest in made:
        try:
            guest.stop()
        except Exception as e:  # keep stopping the others
            errors.append(e)
    if errors:
        raise errors[0]


@pytest.fixture
def apt_mirror(bare_rootfs: Path) -> Iterator[AptMirror]:
    mirror = AptMirror(ensure_workbench().mirror).start()
    try:
        yield mirror
    finally:
        mirror.stop()


def guest_uses_mirror(guest: NetnsGuest, mirror: AptMirror) -> None:
    """The guest's apt knows this mirror and nothing else, as a real guest knows its own."""
    guest.run_root(["rm", "-rf", "/etc/apt/sources.list.d"], check=True)
    guest.run_root(
        ["sh", "-c", "cat > /etc/apt/sources.list"],
        input=mirror.sources_list().encode(),
        check=True,
    )


@pytest.fixture
def git_server() -> Iterator[GitServer]:
    _unavailable(("git", "ip"))
    server = GitServer(token=f"rig-{secrets.token_urlsafe(24)}").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def qemu_guest(rig_rootfs: Path) -> Iterator[QemuGuest]:
    _unavailable(QEMU_TOOLS)
    build_image()
    guest = QemuGuest().start()
    try:
        yield guest
    finally:
        guest.stop()
