"""`sand ui` driven by its keys, with Textual's headless pilot, against the limactl
stand-in and fakepve: the rows show what the far side holds, p plans as `sand plan`
does and changes nothing, a asks `sand apply`'s question (only `yes` approves) and
then the far side changes as the board shows it, the unpushed-work guard holds, an
unobservable backend's rows say so, and a refresh that hangs holds no key.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Any

import pytest
from textual.widgets import DataTable

from sand.cli.ui.app import Board
from tests.cli.helpers import Sand
from tests.cli.ui_pilot import (
    SIZE,
    answer,
    applied,
    board,
    detail,
    dialog,
    observed,
    on_screen,
    rows,
    status,
    title,
    until,
)
from tests.limactl_standin import StandIn
from tests.rig.acceptloop import AcceptLoop

GIB = 1 << 30


@pytest.fixture
def sand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Sand:
    s = Sand(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(s.state_dir))  # the board runs in-process
    monkeypatch.setenv("NO_COLOR", "1")
    return s


def vms_of(standin: StandIn) -> list[str]:
    """The stand-in's instances that are VMs (not the bases sand clones from)."""
    return [name for name in standin.instances() if not name.startswith("sand-base-")]


def lima_manifest(standin: StandIn, *names: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "sand/v1",
        "project": "board",
        "backends": {"laptop": {"type": "lima", "lima_home": str(standin.lima_home)}},
        "defaults": {"image": "debian-12", "disk": "20GiB", "memory": "2GiB", "provision": False},
        "vms": [{"name": n} for n in names],
        **extra,
    }


async def test_keys_apply_the_manifest_to_lima_and_the_rows_follow_the_engine(
    sand: Sand, limactl_standin: StandIn
) -> None:
    sand.write(lima_manifest(limactl_standin, "dev-1"))
    assert sand.run("apply", "--auto-approve").returncode == 0
    sand.write(lima_manifest(limactl_standin, "dev-1", "dev-2"))
    app = board(sand.manifest)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        table = rows(app)
        assert table["dev-1"]["SYNC"] == "Synced" and table["dev-1"]["POWER"] == "running"
        assert "reached at 127.0.0.1:" in detail(app)  # 80 columns: the address is here
        assert table["dev-1"]["LAST APPLY"].startswith("ok ")
        assert table["dev-2"]["SYNC"] == "OutOfSync (create)"
        assert table["dev-2"]["POWER"] == "absent"
        assert "1 Synced · 1 OutOfSync" in title(app)

        # Anything but `yes` approves nothing, as sand apply's prompt.
        await pilot.press("a")
        await answer(pilot, app, "y")
        await applied(pilot, app)
        assert status(app) == "Apply cancelled."
        assert vms_of(limactl_standin) == ["dev-1"]

        seen: list[str] = []
        show_step = app.show_step

        def spy(event: Any) -> None:  # the cell as drawn after each event
            show_step(event)
            seen.append(rows(app).get(event.vm, {}).get("LAST APPLY", ""))

        app.show_step = spy  # type: ignore[method-assign]
        await pilot.press("a")
        await until(pilot, lambda: "will be created" in dialog(app), "the plan in the dialog")
        assert "Do you want to perform these actions? Only 'yes' will be accepted." in dialog(app)
        await answer(pilot, app, "yes")
        await applied(pilot, app)
        assert vms_of(limactl_standin) == ["dev-1", "dev-2"]  # the far side changed
        assert any(cell.startswith("creating ") and cell.endswith("s") for cell in seen), seen
        assert any(cell.startswith("✓ done ") for cell in seen), seen
        assert status(app).startswith("Apply complete! Resources: 1 added, 0 changed")
        assert rows(app)["dev-2"]["SYNC"] == "Synced"
        assert rows(app)["dev-2"]["POWER"] == "running"


async def test_p_plans_as_sand_plan_and_a_yes_changes_proxmox(
    sand: Sand, fakepve_server: Any
) -> None:
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "web-1", "memory": "1GiB"}, {"name": "web-2"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    sand.write(rig.manifest([{"name": "web-1", "memory": "2GiB"}, {"name": "web-2"}]))
    (web1,) = rig.vms_named("web-1")
    app = board(sand.manifest)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        assert rows(app)["web-1"]["SYNC"] == "OutOfSync (update)"
        assert rows(app)["web-2"]["SYNC"] == "Synced"
        rig.clear_log()
        await pilot.press("p")
        await until(pilot, lambda: "Plan: 0 to add, 1 to change" in dialog(app), "the plan")
        plan_text = dialog(app)
        assert '~ memory = "1GiB" -> "2GiB"' in plan_text
        assert all(r.method == "GET" for r in rig.log), [r.method for r in rig.log]
        assert web1.config["memory"] in (1024, "1024")  # planning changed nothing
        await pilot.press("escape")
        # The detail pane: the selected VM's change, as the plan renders it.
        assert "web-1 on pve" in detail(app)
        assert "will be updated in place" in detail(app) and "(p's plan)" in detail(app)

        await pilot.press("a")
        await answer(pilot, app, "yes")
        await applied(pilot, app)
        assert int(rig.vms_named("web-1")[0].config["memory"]) == 2048
        assert rows(app)["web-1"]["SYNC"] == "Synced"


async def test_a_refresh_costs_one_listing(sand: Sand, fakepve_server: Any) -> None:
    rig = fakepve_server
    sand.write(rig.manifest([{"name": f"web-{i}"} for i in range(5)]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    app = board(sand.manifest)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        assert {r["SYNC"] for r in rows(app).values()} == {"Synced"}
        rig.clear_log()
        taken = app.state.snapshot.taken if app.state.snapshot else 0.0
        await pilot.press("r")
        await until(pilot, lambda: app.state.snapshot and app.state.snapshot.taken > taken, "r")
        assert [(r.method, r.path) for r in rig.log] == [("GET", "/cluster/resources")]


def test_without_a_terminal_it_says_what_to_use(sand: Sand, limactl_standin: StandIn) -> None:
    sand.write(lima_manifest(limactl_standin, "dev-1"))
    proc = sand.run("ui")  # stdin and stdout are pipes here
    assert proc.returncode == 1
    assert "sand ui needs a terminal" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.sand_time_scale(0.01)  # the agent's 15 s of silence is not the subject
async def test_a_vm_that_cannot_be_swept_for_work_is_not_deleted(
    sand: Sand, fakepve_server: Any
) -> None:
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "keep"}, {"name": "drop"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    sand.write(rig.manifest([{"name": "keep"}]))
    rig.stop_agent(rig.vms_named("drop")[0].vmid)  # no address: nothing to sweep
    app = board(sand.manifest)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        assert rows(app)["drop"]["SYNC"] == "OutOfSync (delete)"
        await pilot.press("a")
        await until(pilot, lambda: "Nothing to apply" in dialog(app), "the blocked plan", 60)
        assert "treated as holding work" in dialog(app) and "! " in dialog(app)
        await pilot.press("escape")
        await applied(pilot, app)
    assert sorted(v.name for v in rig.vms()) == ["drop", "keep"]


@pytest.mark.sand_time_scale(0.01)  # the retries of the 503 are not the subject
async def test_rows_of_a_backend_nobody_can_observe_say_so(sand: Sand, fakepve_server: Any) -> None:
    rig = fakepve_server
    sand.write(rig.manifest([{"name": "web-1"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    rig.fail("GET", "/cluster/resources", 503, "Service Unavailable")
    app = board(sand.manifest)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        row = rows(app)["web-1"]
        assert row["SYNC"] == "Unknown (backend)"
        assert row["POWER"] == "unknown" and row["HEALTH"] == "Unknown"
        assert "absent" not in " ".join(row.values())
        assert "could not be observed" in detail(app)
        assert "backend pve not observed" in detail(app)


async def test_filter_help_and_selection_keys(sand: Sand, limactl_standin: StandIn) -> None:
    sand.write(lima_manifest(limactl_standin, "api-1", "api-2", "web-1"))
    app = board(sand.manifest)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        assert list(rows(app)) == ["api-1", "api-2", "web-1"]
        await pilot.press("slash", "w", "e", "b")
        assert list(rows(app)) == ["web-1"]
        assert "web-1 on laptop" in detail(app)
        await pilot.press("enter", "escape")
        assert list(rows(app)) == ["api-1", "api-2", "web-1"]
        await pilot.press("j")
        assert detail(app).startswith("api-2 on laptop")
        await pilot.press("question_mark")
        assert "Keys of sand ui" in dialog(app) and "only 'yes' approves" in dialog(app)
        await pilot.press("escape")
        await pilot.press("q")
    assert app.return_code == 0


async def test_a_timer_due_while_the_board_closes_finds_its_widgets(
    sand: Sand, limactl_standin: StandIn
) -> None:
    """The title's clock may tick once more while the board is torn down: the board's
    own widgets are written to, never looked up on a screen that no longer has them."""
    sand.write(lima_manifest(limactl_standin, "api-1"))
    app = board(sand.manifest)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        await pilot.press("q")
    app._tick()  # what the one-second timer calls
    app.say("said as it closed")
    assert app.return_code == 0


async def test_columns_that_do_not_fit_give_way_and_come_back(
    sand: Sand, limactl_standin: StandIn
) -> None:
    sand.write(lima_manifest(limactl_standin, "api-1", "web-1"))
    assert sand.run("apply", "--auto-approve").returncode == 0
    app = board(sand.manifest)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        table = app.query_one("#table", DataTable)
        narrow = rows(app)["api-1"]
        assert "ADDRESS" not in narrow and narrow["BACKEND"] == "laptop"  # room for it
        assert narrow["POWER"] == "running" and narrow["AGE"] != "-"
        assert table.virtual_size.width <= SIZE[0]  # no horizontal scroll at 80 columns
        assert "reached at 127.0.0.1:" in detail(app)  # the detail pane has the address
        await pilot.resize_terminal(160, 30)
        await until(pilot, lambda: "ADDRESS" in rows(app)["api-1"], "every column")
        wide = rows(app)["api-1"]
        assert wide["BACKEND"] == "laptop" and wide["ADDRESS"] != "-"
        await pilot.resize_terminal(*SIZE)
        await until(pilot, lambda: "ADDRESS" not in rows(app)["api-1"], "the address to go")
        assert detail(app).startswith("api-1 on laptop")  # the selection kept
        await pilot.press("q")


def silent_server() -> tuple[AcceptLoop, list[socket.socket]]:
    """A TCP port that accepts and never answers: a backend that hangs."""
    held: list[socket.socket] = []
    return AcceptLoop(socket.create_server(("127.0.0.1", 0)), held.append, "silent"), held


async def test_keys_work_while_a_refresh_hangs(sand: Sand, fakepve_server: Any) -> None:
    rig = fakepve_server
    data = rig.manifest([{"name": f"vm-{i}"} for i in range(3)])
    server, held = silent_server()
    try:
        port = server.listener.getsockname()[1]
        data["backends"]["pve"]["port"] = port
        sand.write(data)
        app = board(sand.manifest)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: held, "the board to reach the hanging backend")
            assert app.jobs.refreshing and app.state.snapshot is None
            await pilot.press("question_mark")
            assert "Keys of sand ui" in dialog(app)
            await pilot.press("escape", "slash", "x")
            assert app.state.filter == "x"
            await pilot.press("escape", "r")  # asked again: one more after it, not two
            assert app.jobs.refreshing and app.jobs.refresh_again
            await pilot.press("q")
        assert app.return_code == 0  # quitting does not wait for the hung observation
    finally:
        server.close()
        for conn in held:
            conn.close()


async def test_a_yes_while_another_applier_holds_the_lease_changes_nothing(
    sand: Sand, fakepve_server: Any
) -> None:
    import asyncio

    from sand.backends.lease import LeaseHolder

    rig = fakepve_server
    sand.write(rig.manifest([{"name": "web-1"}]))
    other = rig.make_backend()
    app = board(sand.manifest)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        said: list[tuple[str, bool]] = []  # each status line, and whether still applying
        say = app.say

        def spy(text: str) -> None:
            say(text)
            said.append((text, app.jobs.applying))

        app.say = spy  # type: ignore[method-assign]
        async with other.lease(LeaseHolder.here(command="elsewhere"), ttl=30):
            await pilot.press("a")
            await answer(pilot, app, "yes")
            await until(pilot, lambda: "is being applied by" in status(app), "the refusal")
            assert rig.vms() == []  # one writer: the board wrote nothing
        # The refusal is shown once the apply is over: an `a` pressed on reading it
        # starts the next one, not "an apply is already running".
        assert [busy for text, busy in said if "is being applied by" in text] == [False]
        await other.close()
        await asyncio.sleep(0)
        await pilot.press("a")
        await answer(pilot, app, "yes")
        await applied(pilot, app)
        assert [vm.name for vm in rig.vms()] == ["web-1"]


def agent_never_answers(sand: Sand, rig: Any) -> Board:
    """web-1, made, its guest agent stopped: its address never comes, and reaching it
    waits up to 300 s. The board of it."""
    sand.write(rig.manifest([{"name": "web-1"}]))
    assert sand.run("apply", "--auto-approve").returncode == 0
    (vm,) = rig.vms()
    rig.stop_agent(vm.vmid)
    return board(sand.manifest)


async def test_l_shows_the_wait_for_the_guest_with_its_clock(
    sand: Sand, fakepve_server: Any
) -> None:
    app = agent_never_answers(sand, fakepve_server)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        await pilot.press("l")
        waiting = "web-1… waiting for the guest agent to report an address"
        await until(pilot, lambda: waiting in status(app) and "/ 300s" in status(app), "l")


async def test_s_shows_the_wait_for_the_guest_with_its_whole_clock_at_80_columns(
    sand: Sand, fakepve_server: Any
) -> None:
    """The status line is one line of 80 columns: "connecting to web-1… waiting for the
    guest agent to report an address  12s / 300s" is longer, and its clock was the part
    the screen's edge cut. The words give way, the clock is whole on screen."""
    app = agent_never_answers(sand, fakepve_server)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        await pilot.press("s")
        await until(pilot, lambda: "connecting to web-1… waiting" in status(app), "s")
        line = next(x for x in on_screen(app) if "connecting to web-1" in x)
        assert re.search(r"… +\d+s / 300s *$", line), line
