"""The board's rows and detail as plain data, without a terminal: what `sand status`
says of each VM, read for the board (the fixed fleet of tests/cli/ui_fixed.py)."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.text import Text

from sand.activity import Retry
from sand.apply.events import Phase, StepEvent
from sand.cli.ui.columns import LAST_AT_LEAST, Fit, columns_that_fit
from sand.cli.ui.detail import Detail, detail_text, journal_lines
from sand.cli.ui.model import (
    COLUMNS,
    Activity,
    BoardRow,
    age,
    board_rows,
    next_activity,
    painted,
    summary,
)
from sand.redaction import register_secret
from tests.cli.ui_fixed import FixedFleet


@pytest.fixture
def rows(tmp_path: Path) -> dict[str, BoardRow]:
    snapshot = FixedFleet(tmp_path).observe()
    return {r.vm: r for r in board_rows(snapshot.report.rows, snapshot.plan)}


def test_each_vm_reads_as_status_says(rows: dict[str, BoardRow]) -> None:
    now = time.time()
    synced, resized, absent, drifted, unknown = (
        rows[n] for n in ("agent-1", "agent-2", "agent-3", "review", "gpu-1")
    )
    assert (synced.sync, synced.why, synced.power, synced.address) == (
        "Synced", "", "running", "127.0.0.1:60022"
    )  # fmt: skip
    assert synced.last_short(now) == "ok 5m ago" and age(synced.created_at, now) == "3h"
    assert resized.sync == "OutOfSync" and resized.short_why == "update"
    assert absent.power == "absent" and absent.short_why == "create"
    assert "drift: cpus" in drifted.why
    assert drifted.last_whole(now) == "failed 5m ago: ssh: guest did not answer"
    assert unknown.unobservable and unknown.sync == "Unknown" and unknown.power == "unknown"
    assert "limactl list failed" in unknown.why
    assert summary(rows.values()) == "5 VMs · 1 Synced · 3 OutOfSync · 1 Unknown"


def test_the_filter_wants_every_word(rows: dict[str, BoardRow]) -> None:
    matching = [vm for vm, r in rows.items() if r.matches("laptop OUTOFSYNC")]
    assert matching == ["agent-2", "agent-3", "review"]
    assert [vm for vm, r in rows.items() if r.matches("")] == list(rows)


def test_an_apply_step_runs_its_own_clock_until_the_vm_is_done() -> None:
    now = time.monotonic()
    step = next_activity(None, StepEvent("a", Phase.PROVISIONING, elapsed=20.0), now - 3)
    assert step.text(now) == "provisioning 3.0s"  # the step's own time, not the VM's
    done = next_activity(step, StepEvent("a", Phase.DONE, elapsed=24.5), now)
    assert done.text(now + 100) == "✓ done 24.5s"  # the VM's whole apply, clock stopped
    failed = next_activity(step, StepEvent("a", Phase.FAILED, elapsed=1.0, layer="ssh"), now)
    assert failed.text(now) == "✗ failed (ssh) 1.0s"


def test_a_bounded_wait_and_a_retry_within_it() -> None:
    now = time.monotonic()
    wait = StepEvent("a", Phase.CREATING, "waiting for the guest agent", limit=300.0)
    step = next_activity(None, wait, now - 45)
    assert step.text(now) == "waiting for the guest agent 45s / 300s"
    retry = replace(wait, retry=Retry("proxmox", "PVE 503", 2, 5, delay=1.6))
    retrying = next_activity(step, retry, now)
    assert retrying.text(now) == (
        "waiting for the guest agent 45s / 300s — PVE 503, retry 2/5 in 1.6s"
    )
    assert retrying.text(now + 1.0).endswith("retry 2/5 in 0.6s")  # counting down
    later = next_activity(retrying, StepEvent("a", Phase.PROVISIONING), now + 2)
    assert later.text(now + 2) == "provisioning 0.0s"  # a new step: no retry, new clock


@pytest.mark.parametrize(
    ("seconds", "said"), [(None, "-"), (5, "5s"), (59, "59s"), (61, "1m"), (7200, "2h")]
)
def test_age(seconds: float | None, said: str) -> None:
    now = 1_000_000.0
    assert age(None if seconds is None else now - seconds, now) == said


def test_the_detail_is_inert_and_redacted(rows: dict[str, BoardRow]) -> None:
    register_secret("detail-canary-4411")
    journal = [
        {"id": "e1", "phase": "intent", "op": "create", "identity": "101", "ts": 0},
        {"id": "e1", "phase": "step", "step": "cloned detail-canary-4411\x1b[2J", "ts": 1},
        {"id": "e1", "phase": "failed", "ts": 2},
    ]
    text = detail_text(
        Detail(rows["agent-2"], journal=journal, provision_log=["\x1b]0;x\x07apt ok"])
    )
    assert "detail-canary-4411" not in text and "\x1b" not in text
    assert "create 101: failed after cloned [redacted]" in text
    assert "press l to sweep" in text and "(not in the last plan)" in text
    assert text.endswith("(none recorded lately)")
    with_trail = detail_text(
        Detail(
            rows["agent-2"], audit=["#7  land.sweep  agent-2  branch=x\x1b[2Jdetail-canary-4411"]
        )
    )
    last = with_trail.splitlines()[-1]
    assert last.startswith("  #7  land.sweep  agent-2  branch=x")
    assert "\x1b" not in last and "detail-canary-4411" not in last
    assert [line.split(" ", 2)[2] for line in journal_lines(journal)] == [
        "create 101: failed after cloned [redacted]",
    ]


def test_the_address_the_backend_then_the_age_give_way_in_a_narrow_terminal(
    rows: dict[str, BoardRow],
) -> None:
    now = time.time()
    cells = [painted(r, now) for r in rows.values()]
    widths = [max(len(str(row[i])) for row in [COLUMNS, *cells]) + 2 for i in range(len(COLUMNS))]

    def drawn(width: int) -> int:
        return columns_that_fit(cells, width).drawn

    assert COLUMNS[-3:] == ("AGE", "BACKEND", "ADDRESS")
    for gone in range(4):  # the first to give way is the last column
        room = sum(widths[: len(COLUMNS) - gone])
        assert drawn(room) == len(COLUMNS) - gone
        assert drawn(room - 1) == len(COLUMNS) - min(gone + 1, 3)
    # 100 columns less the scrollbar: all but three here (80 now scroll: AGENT's 16 cells).
    assert sum(widths[:-3]) <= 98
    # Narrower still, no column is left half off the edge: SYNC drops its reasons (the
    # detail pane has them), then the columns give way from the right, VM and SYNC last.
    fit = columns_that_fit(cells, sum(widths[:-3]) - 1)
    assert (fit.drawn, fit.roles, fit.reasons) == (len(COLUMNS) - 3, False, False)
    assert fit.cell(1, Text("OutOfSync (update)")).plain == "OutOfSync"
    assert drawn(sum(widths[:-3]) - widths[COLUMNS.index("LAST APPLY")] - 30) < 6
    assert drawn(20) == 2
    assert columns_that_fit(cells, 0) == Fit()  # a width not known yet: all, uncut


def test_an_apply_step_is_cut_to_the_room_left_keeping_its_clock(
    rows: dict[str, BoardRow],
) -> None:
    now, began = time.time(), time.monotonic()
    clone = StepEvent("agent-1", Phase.CREATING, "clone of template 9000 to VM 100", limit=1800)
    doing = Activity(clone, began)
    cells = [painted(r, now, doing if r.vm == "agent-1" else None) for r in rows.values()]
    whole = str(cells[0][COLUMNS.index("LAST APPLY")])
    assert whole == "clone of template 9000 to VM 100 0s / 1800s"

    width = 98  # 100 columns less the scrollbar: all but three, LAST APPLY cut
    fit = columns_that_fit(cells, width)
    others = [max(len(str(row[i])) for row in [COLUMNS, *cells]) + 2 for i in range(fit.drawn)]
    del others[COLUMNS.index("LAST APPLY")]
    assert fit.last_room == width - sum(others) - 2  # LAST APPLY takes what is left: no scroll
    assert fit.last_room is not None and LAST_AT_LEAST <= fit.last_room < len(whole)
    assert columns_that_fit(cells, 30).step_room == LAST_AT_LEAST  # never unreadably short

    assert fit.drawn == len(COLUMNS) - 3  # the age gave way too, for the step's room
    cut = str(painted(rows["agent-1"], now, doing, fit.last_room)[COLUMNS.index("LAST APPLY")])
    assert len(cut) <= fit.last_room and cut.startswith("clone of")
    assert cut.endswith("… 0s / 1800s")  # the words give way, the clock stays
    retry = replace(clone, retry=Retry("proxmox", "PVE 503", 2, 5, 1.6))
    retrying = next_activity(doing, retry, began)
    said = retrying.text(began + 0.5, room=50)
    assert said.endswith(" 0s / 1800s — PVE 503, retry 2/5 in 1.1s") and "…" in said
