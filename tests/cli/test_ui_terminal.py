"""`sand ui` on a real pseudo-terminal of 80x24, as a person over SSH runs it: it draws
the fleet, and however it ends (q, Ctrl-C, SIGTERM, the SSH session's SIGHUP, or a bug
raising inside the board) the terminal is given back as it was: the same termios
modes, the alternate screen left, the cursor shown, mouse reporting off. A bad
manifest is the usual located error, before the screen is touched."""

from __future__ import annotations

import os
import select
import signal
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli.helpers import run_sand
from tests.e2e.test_shell_tmux import Terminal
from tests.limactl_standin import StandIn

ROWS, COLS = 24, 80
BROKEN = "import sand.cli.ui.app as app\napp.Board.action_help = lambda self: 1 / 0\n"


@pytest.fixture
def fleet(tmp_path: Path, limactl_standin: StandIn) -> tuple[Path, dict[str, str]]:
    standin = limactl_standin
    manifest = tmp_path / "sand.yaml"
    manifest.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "sand/v1",
                "project": "tty",
                "backends": {"laptop": {"type": "lima", "lima_home": str(standin.lima_home)}},
                "defaults": {"image": "debian-12", "provision": False},
                "vms": [{"name": "dev-1"}, {"name": "dev-2"}],
            }
        )
    )
    env = {**os.environ, "SAND_STATE_DIR": str(tmp_path / "state"), "TERM": "xterm-256color"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    env.pop("NO_COLOR", None)
    return manifest, env


def launch(manifest: Path, env: dict[str, str], *, prelude: str = "") -> Terminal:
    program = f"{prelude}import sys\nfrom sand.cli.main import main\nsys.exit(main())\n"
    argv = [sys.executable, "-c", program, "ui", "-f", str(manifest)]
    term = Terminal(argv, env=env, cwd=manifest.parent)
    import fcntl
    import struct

    fcntl.ioctl(term.master, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
    return term


def end(term: Terminal, timeout: float = 20.0) -> int:
    """Wait for the board to exit, reading all it wrote; the terminal stays open."""
    stop = time.monotonic() + timeout
    while term.proc.poll() is None and time.monotonic() < stop:
        term._read(0.1)
    while select.select([term.master], [], [], 0.2)[0] and term._read(0):
        pass
    return term.proc.wait(timeout=5)


def settle(term: Terminal, seconds: float) -> None:
    """Let the board draw for ``seconds``, reading what it writes meanwhile: a terminal
    nobody reads fills up, and a board blocked on writing reads no key either."""
    stop = time.monotonic() + seconds
    while time.monotonic() < stop:
        term._read(0.05)


def modes(term: Terminal) -> list[object]:
    return termios.tcgetattr(term.master)


def assert_given_back(term: Terminal, before: list[object]) -> None:
    out = bytes(term.output)
    try:
        assert modes(term) == before, "the terminal's modes were not restored"
    finally:
        term.close()
    entered = out.rfind(b"\x1b[?1049h")
    assert entered >= 0, out[:400]
    tail = out[entered:]
    assert b"\x1b[?1049l" in tail  # the alternate screen left: the shell's screen is back
    assert b"\x1b[?25h" in tail  # the cursor shown again
    assert b"\x1b[?1000l" in tail  # mouse reporting off


def drawn(term: Terminal) -> None:
    term.expect(b"dev-2", timeout=30)  # a row of the first observation
    term.expect(b"quit", timeout=5)  # the footer


def test_q_leaves_and_the_terminal_is_as_it_was(fleet: tuple[Path, dict[str, str]]) -> None:
    manifest, env = fleet
    term = launch(manifest, env)
    before = modes(term)
    drawn(term)
    term.type("q")
    assert end(term) == 0
    assert_given_back(term, before)


def test_ctrl_c_leaves_with_130(fleet: tuple[Path, dict[str, str]]) -> None:
    manifest, env = fleet
    term = launch(manifest, env)
    before = modes(term)
    drawn(term)
    term.type("\x03")
    assert end(term) == 130
    assert_given_back(term, before)
    assert b"Interrupted." in bytes(term.output)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_a_signal_ends_the_board_cleanly(
    fleet: tuple[Path, dict[str, str]], sig: signal.Signals
) -> None:
    manifest, env = fleet
    term = launch(manifest, env)
    before = modes(term)
    drawn(term)
    os.kill(term.proc.pid, sig)
    assert end(term) == 130
    assert_given_back(term, before)


def test_a_crash_inside_the_board_gives_the_terminal_back(
    fleet: tuple[Path, dict[str, str]],
) -> None:
    manifest, env = fleet
    term = launch(manifest, env, prelude=BROKEN)
    before = modes(term)
    drawn(term)
    term.type("?")  # the help key now raises ZeroDivisionError
    assert end(term) == 1
    assert_given_back(term, before)
    assert b"ZeroDivisionError" in bytes(term.output)


def test_a_bad_manifest_is_a_located_error_before_the_screen_is_touched(
    fleet: tuple[Path, dict[str, str]],
) -> None:
    manifest, env = fleet
    manifest.write_text("apiVersion: sand/v1\nproject: tty\nvms: [{name: a, cpus: lots}]\n")
    term = launch(manifest, env)
    assert end(term) == 1
    out = bytes(term.output)
    assert b"sand.yaml:3:" in out and b"\x1b[?1049h" not in out


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_quitting_mid_apply_stops_it_where_the_journal_sees_it(
    tmp_path: Path, fakepve_server: Any
) -> None:
    rig = fakepve_server
    rig.set_task_secs("qmclone", 8.0)  # the clone is still running when we leave
    manifest = tmp_path / "sand.yaml"
    manifest.write_text(yaml.safe_dump(rig.manifest([{"name": "web-1"}])))
    env = {**os.environ, "SAND_STATE_DIR": str(tmp_path / "state"), "TERM": "xterm-256color"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    term = launch(manifest, env)
    before = modes(term)
    term.expect(b"web-1", timeout=30)
    term.type("a")
    term.expect(b"Only 'yes' will be accepted", timeout=60)
    term.type("yes\r")
    term.expect(b"clon", timeout=60)  # the row follows the engine into the clone
    term.type("q")
    term.expect(b"q again stops it", timeout=10)
    term.type("q")
    assert end(term, 60) == 130
    assert_given_back(term, before)
    out = bytes(term.output)
    assert b"Interrupted: web-1 was creating" in out and b"(journal)" in out
    # The next apply settles what was left: one VM, not two.
    rig.fast_forward()  # the clone the board left running is done
    proc = run_sand(
        ["apply", "--auto-approve", "-f", str(manifest)],
        cwd=tmp_path,
        env={**env, "NO_COLOR": "1"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [v.name for v in rig.vms()] == ["web-1"]


def test_the_real_board_shows_no_secret_value(tmp_path: Path, fakepve_server: Any) -> None:
    """As test_ui_safety, through sand ui itself: its observations run in a child
    process, and what the board reads on its own (the journal, the provisioning log)
    is redacted with the values it resolved too."""
    from tests.cli.test_ui_safety import CANARY, plant

    rig = fakepve_server
    scoped = [{"name": "API_TOKEN", "scope": "~/work"}]
    data = rig.manifest(
        [{"name": "agent-1", "secrets": scoped}],
        defaults={"provision": True},
        identity=str(rig.identity),
    )
    data["secrets"] = {"API_TOKEN": {"from": {"env": "SAND_TEST_UI_SECRET"}}}
    manifest = tmp_path / "sand.yaml"
    manifest.write_text(yaml.safe_dump(data))
    env = {**os.environ, "SAND_STATE_DIR": str(tmp_path / "state"), "TERM": "xterm-256color"}
    env.update(SAND_TEST_UI_SECRET=CANARY, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    old = os.environ.get("SAND_STATE_DIR")
    os.environ["SAND_STATE_DIR"] = env["SAND_STATE_DIR"]
    try:
        plant("demo", "agent-1")
    finally:
        if old is None:
            del os.environ["SAND_STATE_DIR"]
        else:
            os.environ["SAND_STATE_DIR"] = old
    term = launch(manifest, env)
    before = modes(term)
    term.expect(b"agent-1", timeout=30)
    term.expect(b"[redacted]", timeout=30)
    term.type("p")
    # The dialog's own words: the detail pane says "will be created" before p (the
    # refresh's plan), and an Esc sent then would reach the board, not the dialog.
    term.expect(b"Esc to close", timeout=60)
    assert b"will be created" in term.output
    term.type("\x1b")
    settle(term, 0.5)
    term.type("q")
    assert end(term) == 0
    assert_given_back(term, before)
    out = bytes(term.output)
    assert CANARY.encode() not in out and CANARY[:16].encode() not in out
