"""`sand ui --watch` on fakepve: a save re-plans (the board shows it, nothing is
applied), periodic re-observation shows drift as it is found, and corrects it only
when the manifest says `selfHeal: true`. The loop is apply --watch's own Watcher."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sand.cli.ui.watching import BoardWatch
from tests.cli.helpers import Sand
from tests.cli.ui_pilot import SIZE, board, observed, rows, status, until


@pytest.fixture
def sand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sand:
    s = Sand(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(s.state_dir))
    return s


def watching(sand: Sand, interval: float) -> Any:
    watch = BoardWatch(
        manifest=sand.manifest,
        interval=interval,
        debounce=0.2,
        parallelism=4,
        allow_mass_delete=False,
    )
    return board(sand.manifest, interval=interval, watch=watch)


def cores(rig: Any, name: str) -> int:
    return int(rig.vms_named(name)[0].config["cores"])


async def test_a_save_replans_and_applies_nothing(sand: Sand, fakepve_server: Any) -> None:
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "w-1"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    app = watching(sand, interval=3600)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        await until(pilot, lambda: "start: planned 0 to add" in status(app), "the first plan")
        sand.write(rig.manifest([{"name": "w-1"}, {"name": "w-2"}]))
        await until(pilot, lambda: "manifest saved: planned 1 to add" in status(app), "a re-plan")
        assert rows(app)["w-2"]["SYNC"] == "OutOfSync (create)"
        sand.manifest.write_text("apiVersion: sand/v1\nvms: [\n")  # a broken save
        await until(pilot, lambda: "keeping the last good one" in status(app), "the refusal")
        assert "sand.yaml:" in status(app)
    assert [v.name for v in rig.vms()] == ["w-1"]  # a save never applies


async def test_drift_is_shown_and_corrected_only_with_self_heal(
    sand: Sand, fakepve_server: Any
) -> None:
    rig = fakepve_server
    data = rig.manifest([{"name": "w-1"}])
    sand.write(data)
    assert sand.run("apply", "--auto-approve").returncode == 0
    vmid = rig.vms_named("w-1")[0].vmid
    rig.run(lambda: rig.pve.vm(vmid).config.__setitem__("cores", 6))

    app = watching(sand, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        await until(pilot, lambda: app.watch_runner.runs >= 3, "periodic runs")
        assert rows(app)["w-1"]["SYNC"] == "OutOfSync (update)"
        assert "drift: cpus" in app.state.rows[0].why
        assert cores(rig, "w-1") == 6  # shown, not corrected

    data["selfHeal"] = True
    sand.write(data)
    app = watching(sand, interval=0.5)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: cores(rig, "w-1") == 2, "the drift corrected", 60)
        await until(pilot, lambda: rows(app).get("w-1", {}).get("SYNC") == "Synced", "Synced")
