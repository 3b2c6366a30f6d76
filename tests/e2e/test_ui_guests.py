"""`sand ui` with real guests (netns sshd behind the limactl stand-in).

With the headless pilot: a and yes create and provision two guests, and the detail
pane shows the provisioning log the run left; l sweeps a guest's checkouts as `sand
land` reports them; an emptied manifest is refused by the mass-delete guard; a
checkout holding an unpushed commit keeps its VM from deletion. On a real terminal:
s hands the terminal to the VM's tmux session, what is typed there runs in the guest,
and detaching brings the board back, which then leaves the terminal as it found it.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.ui_pilot import SIZE, answer, applied, board, detail, dialog, observed, rows
from tests.cli.ui_pilot import until as wait_for
from tests.e2e.test_shell_tmux import Terminal
from tests.limactl_standin import StandIn
from tests.provision.e2e_helpers import as_user, stand_in_agents

pytestmark = pytest.mark.e2e


def manifest(standin: StandIn, *names: str) -> dict[str, Any]:
    return {
        "apiVersion": "sand/v1",
        "project": "uie2e",
        # Each VM is backed by its own guest, made beforehand: no base derived for them.
        "backends": {
            "laptop": {
                "type": "lima",
                "lima_home": str(standin.lima_home),
                "derive_bases": False,
            }
        },
        "defaults": {"image": "debian-12", "disk": "20GiB", "memory": "2GiB"},
        "vms": [{"name": n} for n in names],
    }


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, netns_guest: Any) -> Any:
    standin = StandIn.create(tmp_path / "standin", lima_home=tmp_path / "lima")
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SAND_AGENT_SOURCE", str(stand_in_agents(tmp_path / "agents")))
    monkeypatch.setenv("NO_COLOR", "1")
    guests = {name: netns_guest() for name in ("dev-1", "dev-2")}
    for name, guest in guests.items():
        standin.back_with_guest(name, guest)
    path = tmp_path / "sand.yaml"
    path.write_text(yaml.safe_dump(manifest(standin, "dev-1", "dev-2")))
    return standin, guests, path


def vms_of(standin: StandIn) -> list[str]:
    return [n for n in standin.instances() if not n.startswith("sand-base-")]


async def test_apply_land_and_both_guards_through_the_keys(fleet: Any) -> None:
    standin, guests, path = fleet
    app = board(path)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        await pilot.press("a")
        await answer(pilot, app, "yes")
        await applied(pilot, app, timeout=300)
        assert vms_of(standin) == ["dev-1", "dev-2"]
        assert {r["SYNC"] for r in rows(app).values()} == {"Synced"}
        assert {r["PROV"] for r in rows(app).values()} == {"yes"}
        # The guest is what was declared, and the pane shows how provisioning went.
        assert as_user(guests["dev-1"], "command -v claude").returncode == 0
        shown = detail(app)
        assert "provision: ok" in shown and "step(s) changed something" in shown

        # An emptied manifest: the mass-delete guard refuses it, as sand apply does.
        path.write_text(yaml.safe_dump(manifest(standin)))
        await pilot.press("a")
        await wait_for(pilot, lambda: "Refused: the plan deletes" in dialog(app), "refusal", 120)
        assert "2 of 2 managed VMs" in dialog(app) and "Enter a value" not in dialog(app)
        await pilot.press("escape")
        await applied(pilot, app)
        assert vms_of(standin) == ["dev-1", "dev-2"]

        # l: the landing sweep of the selected guest, as sand land reports it.
        path.write_text(yaml.safe_dump(manifest(standin, "dev-1", "dev-2")))
        as_user(
            guests["dev-1"],
            "mkdir -p ~/src/app && cd ~/src/app && git init -q -b feature/x && "
            "git -c user.email=a@b -c user.name=A commit -q --allow-empty -m work && "
            "git remote add origin https://github.com/acme/app.git",
        )
        await pilot.press("l")
        await wait_for(pilot, lambda: "feature/x" in detail(app), "the landing sweep", 60)
        assert "~/src/app" in detail(app)

        # dev-1 now holds a commit pushed nowhere: dropping it from the manifest deletes
        # nothing (dev-2, kept, is Synced: nothing else runs).
        path.write_text(yaml.safe_dump(manifest(standin, "dev-2")))
        await pilot.press("a")
        await wait_for(pilot, lambda: "Nothing to apply" in dialog(app), "the blocked plan", 120)
        assert "holds work that exists nowhere else" in dialog(app)
        await pilot.press("escape")
        await applied(pilot, app)
    assert vms_of(standin) == ["dev-1", "dev-2"]
    check = as_user(guests["dev-1"], "git -C ~/src/app log --oneline")
    assert check.returncode == 0 and b"work" in check.stdout


def test_s_hands_the_terminal_to_the_guest_and_takes_it_back(fleet: Any) -> None:
    import subprocess

    _standin, guests, path = fleet
    env = {**os.environ, "TERM": "xterm-256color"}
    env.pop("TMUX", None)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-m", "sand", "apply", "--auto-approve", "-f", str(path)],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr

    from tests.cli.test_ui_terminal import assert_given_back, end, modes

    term = Terminal([sys.executable, "-m", "sand", "ui", "-f", str(path)], env=env,
                    cwd=path.parent)  # fmt: skip
    before = modes(term)
    term.expect(b"dev-2", timeout=60)
    term.type("s")  # dev-1, the first row, is selected
    term.expect(b"$ ", timeout=60)  # the shell inside the guest's tmux session
    term.type("echo from-the-board > ~/board.txt\r")
    term.type("tmux detach-client\r")  # the session lives on; ssh ends
    term.expect(b"back from dev-1's shell", timeout=60)
    term.type("q")
    assert end(term) == 0
    assert_given_back(term, before)
    made = as_user(guests["dev-1"], "cat ~/board.txt")
    assert made.returncode == 0 and made.stdout.strip() == b"from-the-board"


async def test_the_land_key_wakes_a_vm_asleep_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, netns_guest: Any
) -> None:
    import subprocess

    standin = StandIn.create(tmp_path / "standin", lima_home=tmp_path / "lima")
    for key, value in standin.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SAND_AGENT_SOURCE", str(stand_in_agents(tmp_path / "agents")))
    monkeypatch.setenv("NO_COLOR", "1")
    standin.back_with_guest("dev-1", netns_guest())
    path = tmp_path / "sand.yaml"
    path.write_text(yaml.safe_dump(manifest(standin, "dev-1")))

    def sand(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "sand", *args, "-f", str(path)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)

    assert sand("apply", "--auto-approve").returncode == 0
    proc = sand("sleep", "dev-1")
    assert proc.returncode == 0 and "(stopped)" in proc.stdout, proc.stdout + proc.stderr
    app = board(path)
    async with app.run_test(size=SIZE) as pilot:
        await observed(pilot, app)
        assert rows(app)["dev-1"]["SYNC"] == "Synced (asleep)"
        await pilot.press("l")
        await wait_for(pilot, lambda: "waking dev-1, asleep since" in detail(app), "the wake", 60)
    assert standin.list_json("dev-1")[0]["status"] == "Running"
