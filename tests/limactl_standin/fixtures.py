"""pytest fixture for any test that needs ``limactl``: ``pytest_plugins =
["tests.limactl_standin.fixtures"]`` in the test module, then ask for ``limactl_standin``.

The fixture puts the stand-in first on PATH and points LIMA_HOME at a fresh directory;
use ``limactl_standin.back_with_guest(name, guest)`` to make an instance's ssh.config
lead to a rig guest (NetnsGuest/QemuGuest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.limactl_standin import StandIn


@pytest.fixture
def limactl_standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> StandIn:
    s = StandIn.create(tmp_path / "limactl-standin")
    monkeypatch.setenv("PATH", s.path)
    monkeypatch.setenv("LIMA_HOME", str(s.lima_home))
    s.configure(require_tty_false=True)
    return s
