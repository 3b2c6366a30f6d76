"""What a person and a CI pipeline rely on from the command line, through the real
``python -m sand`` against fakepve: usage errors exit 1 (2 is "changes pending"),
a closed pipe is no traceback, Ctrl-C exits 130 naming what it left, -f/--file
everywhere, global flags after the subcommand, JSON logs, --no-color."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.cli.helpers import Sand, as_from_a_terminal, on_a_terminal


def sand_env(sand: Sand, **extra: str) -> dict[str, str]:
    env = {**os.environ, "SAND_STATE_DIR": str(sand.state_dir), **extra}
    env.pop("NO_COLOR", None)
    return env


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["plan", "--bogus"], "unrecognized arguments: --bogus"),
        (["apply", "--parallelism", "many"], "'many' is not a whole number from 1 to 100"),
        (["--log-format", "xml", "validate"], "invalid choice: 'xml'"),
        (["status", "--log-format", "xml"], "invalid choice: 'xml'"),
        (["status", "--deep", "--timeout", "0"], "is not a number of seconds above 0"),
        (["shell"], "the following arguments are required: VM"),
        (["land", "vm", "--pr", "--web"], "not allowed with argument"),
        (["template"], "the following arguments are required: ACTION"),
        (["completion", "tcsh"], "invalid choice: 'tcsh'"),
        (["nosuchcommand"], "invalid choice: 'nosuchcommand'"),
    ],
)
def test_a_usage_error_exits_1_with_argparse_message(tmp_path, args, says):
    proc = Sand(tmp_path).run(*args)
    assert proc.returncode == 1, proc.stderr
    assert says in proc.stderr
    assert "usage: sand" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


@pytest.mark.parametrize("command", ["plan", "apply", "status", "destroy", "doctor"])
def test_an_unknown_flag_shows_the_usage_of_its_command(tmp_path, command):
    proc = Sand(tmp_path).run(command, "--bogus")
    assert proc.returncode == 1
    assert f"sand {command}: error: unrecognized arguments: --bogus" in proc.stderr
    assert proc.stderr.startswith(f"usage: sand {command} "), proc.stderr


def test_the_manifest_twice_and_different_is_a_usage_error(tmp_path):
    proc = Sand(tmp_path).run("plan", "a.yaml", "-f", "b.yaml")
    assert proc.returncode == 1
    assert "sand plan: error: the manifest is given twice (a.yaml and -f b.yaml)" in proc.stderr
    assert "usage: sand plan" in proc.stderr
    assert Sand(tmp_path).run("plan", "a.yaml", "-f", "a.yaml").stderr.startswith("a.yaml:")


@pytest.fixture
def fleet(tmp_path, fakepve_server):
    """A manifest away from ./sand.yaml: only -f can find it."""
    sand = Sand(tmp_path)
    path = tmp_path / "fleet" / "team.yaml"
    path.parent.mkdir()
    import yaml

    path.write_text(yaml.safe_dump(fakepve_server.manifest([{"name": "f-1"}]), sort_keys=False))
    return sand, "fleet/team.yaml"


def test_dash_f_works_for_every_command_that_takes_a_manifest(fleet, fakepve_server):
    sand, path = fleet
    assert not sand.manifest.exists()
    proc = sand.run("validate", "-f", path)
    assert proc.returncode == 0 and "valid (1 VM on" in proc.stdout, proc.stderr
    proc = sand.run("plan", "--file", path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert [c["vm"] for c in json.loads(proc.stdout)["changes"]] == ["f-1"]
    proc = sand.run("apply", "-f", path, "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert [vm.name for vm in fakepve_server.vms()] == ["f-1"]
    proc = sand.run("status", "-f", path, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "f-1" in proc.stdout
    proc = sand.run("doctor", "-f", path)
    assert "pve" in proc.stdout, proc.stderr
    # The verbs: a VM the manifest does not declare is named against *this* manifest.
    for verb in (["shell", "-f", path, "nope", "--", "true"], ["land", "--file", path, "nope"]):
        proc = sand.run(*verb)
        assert proc.returncode == 1
        assert "declares no VM named 'nope' (VMs: f-1)" in proc.stderr
    proc = sand.run("destroy", "-f", path, "--auto-approve", "--allow-data-loss")  # no guest
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert fakepve_server.vms() == []


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_log_format_json_after_the_subcommand_gives_json_lines(fleet, fakepve_server):
    sand, path = fleet
    proc = sand.run("apply", "-f", path, "--log-format", "json", "--auto-approve")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = json_lines(proc.stderr)
    assert events[0]["event"] == "command started" and events[0]["command"] == "apply"
    assert events[-1]["event"] == "command finished" and events[-1]["exit_code"] == 0
    assert any(e["event"] == "progress" and e["vm"] == "f-1" for e in events)
    assert all("timestamp" in e and "level" in e for e in events)


def test_json_logs_say_start_and_finish_whatever_the_level(fleet):
    sand, path = fleet
    # Before the subcommand, and not clobbered by the subcommand's own (absent) flag.
    proc = sand.run("--log-format", "json", "--log-level", "error", "plan", "-f", path)
    events = json_lines(proc.stderr)
    assert [e["event"] for e in events] == ["command started", "command finished"]
    assert events[-1]["exit_code"] == proc.returncode == 0
    proc = sand.run("plan", "-f", "missing.yaml", "--log-format", "json")
    assert proc.returncode == 1
    finished = json_lines(proc.stderr)[-1]
    assert finished["exit_code"] == 1 and finished["error"]


def test_a_closed_pipe_is_no_traceback(fleet):
    sand, path = fleet
    read, write = os.pipe()
    os.close(read)  # the reader is gone before sand writes a byte
    proc = subprocess.run(
        [sys.executable, "-m", "sand", "plan", "-f", path, "--json"],
        cwd=sand.workdir,
        env=sand_env(sand),
        stdout=write,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        check=False,
    )
    os.close(write)
    assert proc.returncode == 1
    assert proc.stderr == ""  # neither a traceback nor "Exception ignored"
    # And through a real `head -1`, which leaves after its first line.
    head = subprocess.run(
        f"{sys.executable} -m sand plan -f {path} --json | head -1",
        shell=True,
        cwd=sand.workdir,
        env=sand_env(sand),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert head.stdout == "{\n"
    assert "Traceback" not in head.stderr and "BrokenPipe" not in head.stderr


@pytest.mark.fakepve_rig(time_scale=1.0)
def test_ctrl_c_exits_130_and_names_what_was_in_flight(fleet, fakepve_server):
    sand, path = fleet
    fakepve_server.set_task_secs("qmclone", 30.0)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sand", "apply", "-f", path, "--auto-approve"],
        cwd=sand.workdir,
        env=sand_env(sand),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_from_a_terminal,
    )
    try:
        deadline = time.monotonic() + 60
        while not fakepve_server.vms() and time.monotonic() < deadline:
            time.sleep(0.1)  # the clone has begun: f-1 is being created
        assert fakepve_server.vms(), "the clone never started"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    assert "Interrupted: f-1 was creating; the next sand apply settles what was left" in err
    assert "Traceback" not in err
    # What the message promises: the next apply settles it (once the clone is done).
    fakepve_server.set_task_secs("qmclone", 0.0)
    fakepve_server.fast_forward()
    again = sand.run("apply", "-f", path, "--auto-approve")
    assert again.returncode == 0, again.stdout + again.stderr
    assert [vm.name for vm in fakepve_server.vms()] == ["f-1"]
    assert sand.run("plan", "-f", path, "--detailed-exitcode").returncode == 0


def terminal_output(sand: Sand, *args: str, env: dict[str, str]) -> str:
    """What sand writes to stdout when stdout is a terminal."""
    return on_a_terminal(sand, *args, env=env)[0]


def test_no_color_flag_and_env_remove_colour_on_a_terminal(fleet):
    sand, path = fleet
    env = sand_env(sand, TERM="xterm")
    assert "\x1b[" in terminal_output(sand, "plan", "-f", path, env=env)  # colour by default
    plain = terminal_output(sand, "plan", "-f", path, "--no-color", env=env)
    assert "\x1b[" not in plain and "f-1" in plain
    plain = terminal_output(sand, "plan", "-f", path, env={**env, "NO_COLOR": "1"})
    assert "\x1b[" not in plain and "f-1" in plain


@pytest.mark.parametrize(
    ("flags", "unbuffered"),
    [([], ""), (["--log-format", "json"], ""), ([], "1")],
    ids=["lines", "json-log", "lines-unbuffered"],
)
def test_progress_whose_reader_left_does_not_stop_the_apply(
    fleet, fakepve_server, flags, unbuffered
):
    """Whatever sand writes on a stderr whose reader left -- progress lines, JSON log
    events from the first ("command started") to the last -- the apply runs to its end
    and its exit code is the apply's. Python's stderr is buffered unless
    PYTHONUNBUFFERED is set: then what a failed write left in its buffer made the
    interpreter's own last flush fail, and Python exit 120 after a good apply."""
    sand, path = fleet
    read, write = os.pipe()
    os.close(read)  # `sand apply 2>&1 | head`: the progress lines have nowhere to go
    env = sand_env(sand)
    env.pop("PYTHONUNBUFFERED", None)  # Python's default, as on a fresh machine
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    proc = subprocess.run(
        [sys.executable, "-m", "sand", "apply", "-f", path, "--auto-approve", *flags],
        cwd=sand.workdir,
        env=env,
        stdout=subprocess.PIPE,
        stderr=write,
        text=True,
        timeout=120,
        check=False,
    )
    os.close(write)
    assert proc.returncode == 0, proc.stdout
    assert "Apply complete! Resources: 1 added" in proc.stdout
    assert [vm.name for vm in fakepve_server.vms()] == ["f-1"]


def test_validate_counts_in_words_that_agree(tmp_path):
    manifest = tmp_path / "one.yaml"
    manifest.write_text(
        "apiVersion: sand/v1\nproject: demo\nbackends:\n  laptop:\n    type: lima\n"
        "vms:\n  - name: dev\n    image: debian-12\n"
    )
    proc = subprocess.run(
        [sys.executable, "-m", "sand", "validate", str(manifest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{manifest}: valid (1 VM on 1 backend)"
