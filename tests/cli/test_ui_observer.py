"""The board's observer process: sand ui observes in a child process of its own (so
a refresh's work never shares the interpreter lock with the keys). It answers with
the same snapshot an observation on a thread makes, reports a bad manifest as the
located error, is started again if it died, and ends with the board."""

from __future__ import annotations

from pathlib import Path

import pytest

from sand.cli.ui.fleet import Fleet
from sand.cli.ui.observer import Observer, ObserverError
from tests.cli.helpers import Sand
from tests.limactl_standin import StandIn


@pytest.fixture
def fleet(tmp_path: Path, limactl_standin: StandIn, monkeypatch: pytest.MonkeyPatch) -> Path:
    sand = Sand(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(sand.state_dir))
    sand.write(
        {
            "apiVersion": "sand/v1",
            "project": "obs",
            "backends": {"laptop": {"type": "lima", "lima_home": str(limactl_standin.lima_home)}},
            "defaults": {"image": "debian-12", "provision": False},
            "vms": [{"name": "dev-1"}, {"name": "dev-2"}],
        }
    )
    assert sand.run("apply", "--auto-approve").returncode == 0
    return sand.manifest


def test_the_child_observes_as_the_thread_does(fleet: Path, tmp_path: Path) -> None:
    log = tmp_path / "ui.log"
    observer = Observer(fleet, log=log)
    try:
        far = Fleet(fleet, observer=observer).observe()
        near = Fleet(fleet).observe()
        assert [(r.vm, r.sync, r.power, r.address) for r in far.rows] == [
            (r.vm, r.sync, r.power, r.address) for r in near.rows
        ]
        assert {r.sync for r in far.rows} == {"Synced"}
        first = observer.proc
        assert first is not None and first.poll() is None

        fleet.write_text("apiVersion: sand/v1\nproject: obs\nvms: [{name: a, cpus: lots}]\n")
        with pytest.raises(ObserverError, match=r"sand\.yaml:3:"):
            observer.observe()
        assert observer.proc is first  # an error is an answer; the child lives on

        first.kill()
        first.wait()
        with pytest.raises(ObserverError, match=r"sand\.yaml:3:"):
            observer.observe()  # a new child answers
        assert observer.proc is not None and observer.proc is not first
    finally:
        child = observer.proc
        observer.close()
    assert child is not None and child.returncode is not None  # ended with the board
    assert log.exists()  # what the child logs goes there, not to the board's terminal
