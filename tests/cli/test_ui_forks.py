"""Forks and warm pools on the board (issue 29): a fork's row says of which VM it is a
fork, a pool's spares come after the person's VMs labelled as their pool's, a plan's
pending claim and refill read as the plan text says them, and ``c`` opens the compare
view of a source's forks (read off the UI thread, read again with ``r``, closed with
Esc). The rows come from the real planner and ``sand status``'s real rows over fixed
observations (tests/cli/ui_fixed.py), and from the limactl stand-in's VMs; the compare
view against real guests is in tests/e2e/test_ui_compare.py."""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from sand import activity
from sand.cli.ui.app import Board
from sand.cli.ui.detail import Detail, detail_text
from sand.cli.ui.model import summary
from sand.cli.ui.screens import CompareScreen
from sand.errors import SandError
from sand.observed import Observation
from sand.verbs.compare import ForkView
from tests.cli.helpers import Sand
from tests.cli.ui_fixed import ForkFleet
from tests.cli.ui_pilot import (
    SIZE,
    board,
    detail,
    fitted,
    observed,
    on_screen,
    rows,
    status,
    title,
    until,
)
from tests.limactl_standin import StandIn


class CountedForks(ForkFleet):
    """The fixed forks, counting the compare reads the board asks for (and where)."""

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.reads: list[tuple[str, ...]] = []
        self.threads: list[str] = []

    def compare(self, forks: Sequence[str]) -> list[ForkView]:
        import threading

        self.reads.append(tuple(forks))
        self.threads.append(threading.current_thread().name)
        return super().compare(forks)


@pytest.fixture
def forks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CountedForks:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return CountedForks(tmp_path)


def test_forks_say_of_which_vm_and_spares_come_last_as_their_pools(forks: CountedForks) -> None:
    snapshot = forks.observe()
    now = time.time()
    cells = {r.vm: r.cells(now) for r in snapshot.rows}
    assert [r.vm for r in snapshot.rows] == [
        "agent-1", "try-1", "try-2", "review", "agent-4", "agents-spare-1", "agents-spare-2",
    ]  # fmt: skip
    assert cells["agent-1"][0] == "agent-1"  # a source is a VM like any other
    assert cells["try-1"][0] == "try-1 · fork of agent-1"
    # The pending claim and refill, as the plan decided them: agent-4 claims spare 1, and
    # spare 1's slot is refilled in the same apply.
    assert cells["agent-4"][:2] == ("agent-4 · claims agents-spare-1", "OutOfSync (create)")
    assert cells["agents-spare-1"][:2] == (
        "agents-spare-1 · spare of pool agents",
        "OutOfSync (refill 1/2)",
    )
    assert cells["agents-spare-2"][:2] == ("agents-spare-2 · spare of pool agents", "Synced")
    # Until the claim, the spare it takes is there, up and ready: not "absent", unhealthy.
    spare = next(r for r in snapshot.rows if r.vm == "agents-spare-1")
    assert (spare.power, spare.health, spare.claimed_by) == ("running", "Healthy", "agent-4")
    assert summary(snapshot.rows) == "5 VMs · 2 spares · 5 Synced · 2 OutOfSync"


def test_the_detail_says_a_claim_and_a_refill_as_the_plan_text_does(forks: CountedForks) -> None:
    snapshot = forks.observe()
    by_vm = {r.vm: r for r in snapshot.rows}

    def pane(vm: str, **more: Any) -> str:
        row = by_vm[vm]
        return detail_text(Detail(row, change=snapshot.plan.change_for("laptop", vm), **more))

    claim = pane("agent-4")
    assert "  claims spare agents-spare-1 of pool agents\n" in claim
    assert '+ vm "agent-4" (claims spare agents-spare-1 of pool agents) {' in claim
    refill = pane("agents-spare-1")
    assert "  spare of pool agents, claimed by agent-4 (refill 1/2)\n" in refill
    assert '+ spare "agents-spare-1" of pool agents (refill 1/2) {' in refill
    assert "c: compare the forks of agent-1 side by side" in pane("try-1")
    assert "forks: try-1, try-2 (c compares them)" in pane("agent-1", forks=["try-1", "try-2"])


def test_the_filter_finds_forks_and_spares_by_what_they_are(forks: CountedForks) -> None:
    rows_ = forks.observe().rows
    assert [r.vm for r in rows_ if r.matches("fork of agent-1")] == ["try-1", "try-2"]
    assert [r.vm for r in rows_ if r.matches("pool agents")] == [
        "agent-4", "agents-spare-1", "agents-spare-2",
    ]  # fmt: skip


def test_a_fork_no_entry_declares_is_still_a_fork_of_its_source(tmp_path: Path) -> None:
    """Made by ``sand fork --apply`` and not added yet: its marker says what it is."""

    class Undeclared(ForkFleet):
        def observations(self, want: dict[str, Any]) -> dict[str, Observation]:
            seen = super().observations(want)["laptop"]
            made = replace(self.seen(want["try-2"], 60099), name="try-9", identity="try-9")
            return {"laptop": replace(seen, vms=(*seen.vms, made))}

    rows_ = {r.vm: r for r in Undeclared(tmp_path).observe().rows}
    assert rows_["try-9"].named == "try-9 · fork of agent-1"
    assert rows_["try-9"].sync == "OutOfSync"  # the next apply deletes it, as the plan says


async def test_at_80x24_forks_and_spares_leave_every_column_drawn_whole(
    forks: CountedForks,
) -> None:
    """An SSH session's default terminal: a fork's and a spare's role must not blow the
    VM column up and push POWER half off the edge ("runnin") and AGENT and LAST APPLY
    off it. The roles give way to the detail pane, where they are whole, and the filter
    finds them."""
    app = Board(forks)
    async with app.run_test(size=SIZE) as pilot:
        await fitted(pilot, app)
        lines = on_screen(app)
        header = lines[1] + " "
        for column in ("VM", "SYNC", "HEALTH", "PROV", "POWER", "AGENT", "LAST APPLY"):
            assert f" {column} " in header, lines
        drawn = {line.split()[0]: line + " " for line in lines[2:9]}
        assert list(drawn) == [r.vm for r in app.state.rows], lines
        for row in app.state.rows:  # each word whole, where its header is
            at = header.index(" POWER ")
            assert drawn[row.vm][at:].startswith(f" {row.power} "), lines
        assert " working 2m " in drawn["try-1"] and " failed 5m ago " in drawn["review"], lines
        assert " ok 5m ago " in drawn["agent-1"], lines

        await pilot.press("j")  # try-1: what it is, whole in the detail pane
        await until(pilot, lambda: "try-1 on laptop" in detail(app), "try-1's detail")
        assert "\n  fork of agent-1\n" in detail(app)
        await pilot.press("slash", *"spare", "enter")
        await until(pilot, lambda: len(rows(app)) == 3, "the filter")
        assert list(rows(app)) == ["agent-4", "agents-spare-1", "agents-spare-2"]

        await pilot.press("escape")  # a wider terminal has room for the roles again
        await pilot.resize_terminal(160, 24)
        await until(pilot, lambda: "try-1 · fork of agent-1" in rows(app), "the roles")
        await pilot.resize_terminal(*SIZE)
        await until(pilot, lambda: "try-1" in rows(app), "the names alone")


async def test_c_opens_the_sources_forks_reads_them_off_the_ui_thread_again_and_closes(
    forks: CountedForks,
) -> None:
    app = Board(forks)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        assert "try-1" in rows(app)  # its role is in its detail at 80 columns
        # review: neither a fork nor a source.
        await pilot.press("j", "j", "j", "c")
        await until(pilot, lambda: "no VM on the board is a fork of it" in status(app), "the no")
        assert forks.reads == [] and not isinstance(app.screen, CompareScreen)

        await pilot.press("k", "c")  # try-2: its source's forks, both
        await until(pilot, lambda: "read at" in str(getattr(app.screen, "text", "")), "a read")
        text = str(app.screen.text)  # type: ignore[attr-defined]
        assert "sand land --compare try-1 try-2" in text
        table = [line.split()[:4] for line in text.split("\n\n", 1)[1].splitlines()]
        assert table[1:] == [["try-1", "~/app", "fork/try-1", "2"],
                             ["try-2", "~/app", "fork/try-2", "0"]]  # fmt: skip
        assert forks.reads == [("try-1", "try-2")]
        assert forks.threads == ["sand-ui-compare"]  # never the UI thread

        await pilot.press("r")
        await until(pilot, lambda: len(forks.reads) == 2, "a second read")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen), "the view closed")
        assert "try-2 on laptop" in detail(app)  # the board as it was, try-2 selected


async def test_on_lima_spares_a_claim_its_refill_and_an_undeclared_fork_read_off_the_vms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limactl_standin: StandIn
) -> None:
    """Through the limactl stand-in: spares made by a real apply, a fork made by ``sand
    fork --apply`` (its marker the only word on what it is), then the manifest asks for
    a VM of the pool: the board shows what the plan will do."""
    sand = Sand(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(sand.state_dir))  # the board runs in-process
    monkeypatch.setenv("NO_COLOR", "1")
    manifest: dict[str, Any] = {
        "apiVersion": "sand/v1",
        "project": "boardpools",
        "backends": {"laptop": {"type": "lima", "lima_home": str(limactl_standin.lima_home)}},
        "defaults": {"image": "debian-12", "disk": "20GiB", "memory": "2GiB", "provision": False},
        "pools": {"agents": {"warm": 1}},
        "vms": [{"name": "agent-1"}],
    }
    sand.write(manifest)
    made = sand.run("apply", "--auto-approve")
    assert made.returncode == 0, made.stdout + made.stderr
    forked = sand.run("fork", "agent-1", "--apply", "--auto-approve")
    assert forked.returncode == 0, forked.stdout + forked.stderr
    manifest["vms"].append({"name": "agent-4", "pool": "agents"})
    sand.write(manifest)

    app = board(sand.manifest)
    async with app.run_test(size=(160, 40)) as pilot:  # room for the roles in the rows
        await fitted(pilot, app)
        table = rows(app)
        assert list(table) == [
            "agent-1",
            "agent-4 · claims agents-spare-1",
            "agent-1-fork-1 · fork of agent-1",
            "agents-spare-1 · spare of pool agents",
        ], table
        spare = table["agents-spare-1 · spare of pool agents"]
        assert spare["SYNC"] == "OutOfSync (refill 1/1)"
        # The spare agent-4 claims is there until the claim: up and ready, not "absent".
        assert (spare["POWER"], spare["HEALTH"]) == ("running", "Healthy"), spare
        assert table["agent-1-fork-1 · fork of agent-1"]["SYNC"] == "OutOfSync (delete)"
        assert "3 VMs · 1 spare · 1 Synced · 3 OutOfSync" in title(app)
        await pilot.press("j")
        await until(pilot, lambda: "agent-4 on laptop" in detail(app), "agent-4's detail")
        assert "  claims spare agents-spare-1 of pool agents\n" in detail(app)
        await pilot.press("j", "j")
        await until(pilot, lambda: "agents-spare-1 on laptop" in detail(app), "the spare's")
        assert "  spare of pool agents, claimed by agent-4 (refill 1/1)\n" in detail(app)


async def test_the_compare_view_shows_its_wait_with_a_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reaching a fork's guest can take minutes (its agent, its SSH): the view says how
    long it has been reading, and the step the layers below are in with its clock, as
    every other wait of the board does, instead of a still "reading…"."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    release = threading.Event()

    class Slow(ForkFleet):
        def compare(self, forks: Sequence[str]) -> list[ForkView]:
            activity.step("waiting for the guest agent to report an address", limit=300)
            release.wait(60)
            return super().compare(forks)

    app = Board(Slow(tmp_path))
    try:
        async with app.run_test(size=SIZE) as pilot:
            await observed(pilot, app)
            await pilot.press("j", "c")

            def said() -> str:
                return str(getattr(app.screen, "text", ""))

            waiting = "(read-only)… 1s · waiting for the guest agent to report an address"
            await until(pilot, lambda: waiting in said(), "the clock")
            assert re.search(r"address  \d+s / 300s", said()), said()
            release.set()
            await until(pilot, lambda: "read at" in said(), "the read")
            assert "waiting for" not in said()
    finally:
        release.set()


async def test_a_compare_that_fails_says_why_in_the_view_and_the_board_lives_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))

    class Failing(ForkFleet):
        def compare(self, forks: Sequence[str]) -> list[ForkView]:
            raise SandError("backend laptop: limactl list failed: exit 1")

    app = Board(Failing(tmp_path))
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        await pilot.press("j", "c")
        said = "Error: backend laptop: limactl list failed: exit 1"
        await until(pilot, lambda: said in str(getattr(app.screen, "text", "")), "the error")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, CompareScreen), "the view closed")
        assert "try-1" in rows(app)
