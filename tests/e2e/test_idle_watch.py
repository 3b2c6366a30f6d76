"""Idle VMs under `sand apply --watch` and `sand sync` (one reconcile run each time),
against a real guest (netns sshd behind the limactl stand-in, provisioned by a real
`sand apply`): the run that finds a VM idle puts it to sleep as a planned change, and
the runs after it leave it asleep -- it is in sync, not drift to correct.

And what a run costs the guest: one exchange (one SSH session), in which the plan
learns who uses the guest and what its agents say; the run's read of the agents'
state afterwards (for notify:, sync --metrics) takes it from there.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from sand.loops.unattended import Reconciler
from sand.survey.agentread import AgentReader
from tests.cli.test_watch import Watch
from tests.e2e.test_agent_board import sessions_accepted
from tests.e2e.test_agent_notify import Webhook
from tests.e2e.test_agent_state import Fleet
from tests.e2e.test_idle_lima import MANIFEST, booted_hours_ago, status_of
from tests.e2e.test_idle_proxmox import write_agents

pytestmark = pytest.mark.e2e


def watching(fleet: Fleet, *args: str, env: dict[str, str] | None = None) -> Watch:
    """`sand apply --watch ARGS` started with ``fleet``'s environment, read as
    :class:`tests.cli.test_watch.Watch` reads its own."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "sand", "apply", "--watch", *args],
        cwd=fleet.root, env=env or fleet.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    watch = Watch.__new__(Watch)
    watch.proc, watch.err, watch.out = proc, [], []
    for stream, sink in ((proc.stderr, watch.err), (proc.stdout, watch.out)):
        threading.Thread(target=Watch._pump, args=(stream, sink), daemon=True).start()
    return watch


async def test_a_run_asks_each_guest_once_who_uses_it_and_what_its_agents_do(
    tmp_path: Path, netns_guest: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    guest = netns_guest()
    fleet = Fleet(tmp_path, guest, MANIFEST)
    for key, value in fleet.env.items():
        monkeypatch.setenv(key, value)
    booted_hours_ago(fleet, 5)
    write_agents(guest, "working", hours_ago=4)  # in use: the plan has nothing to do
    # A sync run with --metrics: the plan asks the guest (idle: is it used?), and the
    # agents' state is read after the run, as every such run does.
    reconciler = Reconciler(
        parallelism=2, allow_mass_delete=False, command="sync", agents=AgentReader(),
        always_read=True,
    )  # fmt: skip
    for _ in range(2):
        before = sessions_accepted(guest)
        result = await reconciler.run(tmp_path / "sand.yaml", "periodic")
        assert result.ok and result.plan is not None and not result.plan.has_changes
        # The plan's own exchange answered (else the read after it asks again).
        assert "dev-1" in result.plan.agents, result.problems()
        assert result.agents is not None
        assert [s.state for s in result.agents["dev-1"].sessions] == ["working"]
        assert sessions_accepted(guest) == before + 1  # one exchange per run, not two

    # The agent's turn ended two hours ago: this run puts the VM to sleep, and what its
    # agents said comes from the plan's exchange (the VM is stopped by then).
    write_agents(guest, "done", hours_ago=2)
    before = sessions_accepted(guest)
    result = await reconciler.run(tmp_path / "sand.yaml", "periodic")
    assert result.ok and result.outcome is not None, result.problems()
    assert status_of(fleet) == "Stopped"
    assert result.agents is not None
    assert [s.state for s in result.agents["dev-1"].sessions] == ["done"]
    assert sessions_accepted(guest) == before + 1


def test_apply_watch_puts_an_idle_vm_to_sleep_and_the_next_runs_leave_it_asleep(
    tmp_path: Path, netns_guest: Any
) -> None:
    hook = Webhook()
    guest = netns_guest()
    notify = f"notify:\n  webhook: {{url: '{hook.url}'}}\n  debounce: 0\n"
    fleet = Fleet(tmp_path, guest, MANIFEST + notify)
    booted_hours_ago(fleet, 5)
    write_agents(guest, "done", hours_ago=2)
    accepted = sessions_accepted(guest)
    fleet.standin.clear_log()
    watch = watching(fleet, "--interval", "1")
    try:
        watch.wait_for(lambda: len(watch.runs()) >= 4, timeout=120)
        # A save is a triggered run: drift would be corrected in it; sleep is not drift.
        (tmp_path / "sand.yaml").write_text(MANIFEST + notify + "# saved\n")
        watch.wait_for(lambda: any(r == "manifest saved" for _, r in watch.runs()), timeout=60)
        runs = len(watch.runs())
        watch.wait_for(lambda: len(watch.runs()) >= runs + 2, timeout=60)
    finally:
        watch.stop()
        hook.close()
    said = "".join(watch.out + watch.err)
    assert said.count("will go to sleep") == 1, said
    assert "~ power running -> stopped (idle 2h" in said
    commands = fleet.standin.commands()
    assert commands.count("stop") == 1 and "start" not in commands, commands
    assert status_of(fleet) == "Stopped"
    proc = fleet.sand("status", "--json")
    row = json.loads(proc.stdout)["vms"][0]
    assert row["asleep"]["how"] == "stopped" and row["conditions"]["Synced"] is True
    # The guest was asked once: by the run that put it to sleep (its plan's exchange,
    # which notify's read of the agents took its answer from); never since.
    assert sessions_accepted(guest) == accepted + 1
