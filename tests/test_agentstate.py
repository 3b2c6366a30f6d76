"""The guest's agent-state file read as data: which session the board's cell speaks of,
what counts as idle, what the metrics count, and what is left out."""

from __future__ import annotations

import json

from sand.agentstate import AgentReport, cell, counts, parse_state, report_from_json


def report(*sessions: tuple[str, str, str, int]) -> AgentReport:
    doc = {"v": 1, "sessions": [
        {"agent": a, "session": s, "state": st, "since": since, "cwd": "/w"}
        for a, s, st, since in sessions
    ]}  # fmt: skip
    return parse_state(json.dumps(doc).encode())


def test_the_cell_names_the_most_urgent_session_and_how_many_others() -> None:
    r = report(("claude", "a", "working", 100), ("codex", "b", "needs-input", 900),
               ("pi", "c", "done", 50))  # fmt: skip
    assert cell(r, 1080) == "needs input 3m +2"
    assert cell(report(("claude", "a", "working", 100)), 100 + 12 * 60) == "working 12m"
    assert cell(report(("claude", "a", "idle", 0)), 7300) == "idle 2h"
    assert cell(AgentReport(), 5) == "-" and cell(None, 5) == "-"


def test_idle_since_is_unknown_while_one_works_and_the_latest_change_otherwise() -> None:
    assert report(("claude", "a", "working", 100), ("pi", "b", "done", 50)).idle_since() is None
    assert report(("claude", "a", "done", 100), ("pi", "b", "idle", 150)).idle_since() == 150
    assert AgentReport().idle_since() is None


def test_counts_by_vm_agent_and_state() -> None:
    r = report(("claude", "a", "working", 1), ("claude", "b", "working", 2),
               ("pi", "c", "done", 3))  # fmt: skip
    assert list(counts({"dev-1": r})) == [
        ("dev-1", "claude", "working", 2),
        ("dev-1", "pi", "done", 1),
    ]


def test_a_record_outside_the_closed_sets_is_left_out_and_the_rest_survive_a_round_trip() -> None:
    r = report(("claude", "a", "working", 1), ("vim", "b", "working", 2),
               ("pi", "c", "asleep", 3), ("pi", "d", "done", True))  # type: ignore[arg-type]  # fmt: skip
    assert [s.session for s in r.sessions] == ["a"]
    assert r.problem == "3 malformed session record(s) left out"
    assert report_from_json(r.to_json()) == r
    assert parse_state(b"") == AgentReport()
    assert parse_state(b"[1, 2]").problem == "agent state file holds no sessions list: not read"


def test_a_presence_line_is_numbers_only_and_anything_else_is_no_answer() -> None:
    from sand.agentstate import AgentReport, GuestPresence, parse_presence

    report = AgentReport()
    good = parse_presence(b"--sand-presence-- 1700000000 2 1699999000 1", report)
    assert good == GuestPresence(1700000000, 2, 1699999000, 1, report)
    for hostile in (
        b"--sand-presence-- unknown",  # no ps in the guest
        b"--sand-presence-- 1700000000 0 0 -1",
        b"--sand-presence-- 1700000000 0 0 0 \x1b[2J",
        b"--sand-presence-- 1700000000 9999999 0 0",  # more clients than a guest has
        b"--sand-presence-- 17000000000000000 0 0 0",
        b"--sand-presence-- 1700000000 0 0 0\n--sand-presence-- 1 0 0 0",
        b"--sand-presence-- " + b"9" * 100_000,
    ):
        assert parse_presence(hostile, report) is None, hostile


def test_the_checks_answers_are_told_from_the_presence_line() -> None:
    from sand.agentstate import AgentReport
    from sand.survey.health import split_presence

    report = AgentReport()
    answers, presence = split_presence(b"ok\nmissing\n--sand-presence-- 50 1 40 0\n", report)
    assert answers.split() == [b"ok", b"missing"]
    assert presence is not None and (presence.now, presence.tmux_clients) == (50, 1)
    # The presence line is the last before the agents' mark, or no answer: a guest that
    # printed one among the answers gets none (so nothing sleeps on its word).
    _, presence = split_presence(b"--sand-presence-- 1 0 0 0\nok\nbogus\n", report)
    assert presence is None
    assert split_presence(b"ok\n", report) == (b"ok\n", None)
    assert split_presence(b"ok\n--sand-presence-- 1 0 0 0\n", None) == (
        b"ok\n--sand-presence-- 1 0 0 0\n",
        None,
    )
