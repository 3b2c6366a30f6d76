"""A Lima fork stops its source for the copy, so it is refused while the source's
agent is working (read from the real guest as the deep check reads it), unless its
``from:`` says ``force: true`` (issue 29, item 1)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.audit.helpers import audit_records
from tests.e2e.test_agent_state import MANIFEST, STATE, Fleet

pytestmark = pytest.mark.e2e

FORK = "  - name: try-1\n    from: {vm: dev-1%s}\n    provision: false\n"


def agent_is(fleet: Fleet, state: str) -> None:
    session = {"agent": "claude", "session": "s1", "state": state, "since": int(time.time())}
    doc = json.dumps({"sessions": [{**session, "cwd": "~/work"}]}).encode()
    fleet.as_user(f"mkdir -p ~/.local/state/sand && cat > ~/{STATE}", doc)


def calls(fleet: Fleet) -> list[str]:
    out = []
    for inv in fleet.standin.invocations():
        words = [w for w in inv.argv[1:] if not w.startswith("-")]
        if words and words[0] in ("stop", "clone"):
            out.append(" ".join(words))
    return out


def test_a_fork_is_refused_while_the_sources_agent_works_unless_forced(
    tmp_path: Path, netns_guest
) -> None:
    fleet = Fleet(tmp_path, netns_guest())
    agent_is(fleet, "working")
    (tmp_path / "sand.yaml").write_text(MANIFEST + FORK % "")
    fleet.standin.clear_log()
    proc = fleet.sand("apply", "--auto-approve")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "not forking dev-1 into try-1: its agent is working (claude)" in out, out
    assert "force: true" in out
    assert calls(fleet) == []  # the source was never stopped
    assert "try-1" not in fleet.standin.instances()

    (tmp_path / "sand.yaml").write_text(MANIFEST + FORK % ", force: true")
    plan = fleet.sand("plan")
    assert "stops dev-1 for the copy, even while its agent works)" in plan.stdout, plan.stdout
    proc = fleet.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls(fleet) == ["stop dev-1", "clone dev-1 try-1"]
    (source,) = fleet.standin.list_json("dev-1")
    assert source["status"] == "Running"


def test_forks_of_one_working_source_are_refused_together(tmp_path: Path, netns_guest) -> None:
    """The forks of one source in one apply share one look at its agent (they are copied
    with one stop): each is refused by name, and the source is never stopped."""
    fleet = Fleet(tmp_path, netns_guest())
    agent_is(fleet, "working")
    two = FORK % "" + (FORK % "").replace("try-1", "try-2")
    (tmp_path / "sand.yaml").write_text(MANIFEST + two)
    fleet.standin.clear_log()
    proc = fleet.sand("apply", "--auto-approve", "--parallelism", "4")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    for fork in ("try-1", "try-2"):
        assert f"not forking dev-1 into {fork}: its agent is working (claude)" in out, out
    assert calls(fleet) == []
    assert not {"try-1", "try-2"} & set(fleet.standin.instances())


def test_a_fork_is_reached_after_its_host_keys_are_made_anew(tmp_path: Path, netns_guest) -> None:
    """The fork-identity step makes the fork's SSH host keys anew within the boot sand
    pinned its key for; sand pins the new key, read over its own connection, so the
    next connection (sand shell) reaches the fork (found on the real Lima)."""
    source, copy = netns_guest(), netns_guest()
    fleet = Fleet(tmp_path, source)
    fleet.standin.back_with_guest("try-1", copy)  # what the clone boots as
    (tmp_path / "sand.yaml").write_text(MANIFEST + "  - name: try-1\n    from: {vm: dev-1}\n")
    proc = fleet.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    shell = fleet.sand("shell", "try-1", "--", "hostname")
    assert shell.returncode == 0, shell.stdout + shell.stderr
    assert shell.stdout == "try-1\n"
    assert fleet.sand("plan", "--detailed-exitcode").returncode == 0
    # the host's audit trail: the fork and its source, then the shell opened and closed
    records = audit_records(tmp_path / "state")
    (forked,) = [r for r in records if r["kind"] == "vm.forked"]
    assert (forked["vm"], forked["source"], forked["change"], forked["ok"]) == (
        "try-1", "dev-1", "create", True
    )  # fmt: skip
    shells = [(r["kind"], r["vm"]) for r in records if r["kind"].startswith("shell.")]
    assert shells == [("shell.opened", "try-1"), ("shell.closed", "try-1")]
    assert records[-1]["exit"] == 0 and records[-1]["opened"] == records[-2]["seq"]
    assert "hostname" not in json.dumps(records[-2:])  # never the command a person typed


@pytest.mark.parametrize("spoil", ["needs-input", "not JSON"])
def test_a_fork_is_blocked_in_the_plan_while_the_sources_agent_waits_for_input(
    tmp_path: Path, netns_guest, spoil: str
) -> None:
    """An agent waiting for input holds its question only in memory: the copy's stop of
    the source would end it. The plan reads the source's agents and shows the fork
    blocked (`!`, at its from:), as it does when they cannot be read; `force: true`
    makes it (issue 36, item 6c)."""
    fleet = Fleet(tmp_path, netns_guest())
    if spoil == "not JSON":
        fleet.as_user(f"mkdir -p ~/.local/state/sand && printf '{{oops' > ~/{STATE}")
        said = "the copy stops dev-1, and whether its agent is working could not be read"
    else:
        agent_is(fleet, "needs-input")
        said = "its agent waits for input (claude) and the copy stops dev-1"
    (tmp_path / "sand.yaml").write_text(MANIFEST + FORK % "")
    fleet.standin.clear_log()
    plan = fleet.sand("plan", "--detailed-exitcode")
    assert plan.returncode == 1, plan.stdout + plan.stderr
    assert '! vm "try-1"' in plan.stdout, plan.stdout
    assert f"sand.yaml:10:11: not forking dev-1 into try-1: {said}" in plan.stdout, plan.stdout
    doc = json.loads(fleet.sand("plan", "--json").stdout)
    (change,) = [c for c in doc["changes"] if c["vm"] == "try-1"]
    assert change["action"] == "blocked" and said in json.dumps(change)
    proc = fleet.sand("apply", "--auto-approve")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert calls(fleet) == []  # the source was never stopped
    assert "try-1" not in fleet.standin.instances()

    (tmp_path / "sand.yaml").write_text(MANIFEST + FORK % ", force: true")
    proc = fleet.sand("apply", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls(fleet) == ["stop dev-1", "clone dev-1 try-1"]
