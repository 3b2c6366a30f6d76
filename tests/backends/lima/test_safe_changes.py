"""Lima, on the limactl stand-in: preflight refuses what ``limactl create`` would, and a
replacement is created (under a temporary name) before the old instance is deleted,
then takes its name with ``limactl rename``."""

from __future__ import annotations

import json

from tests.backends.lima.test_cli import Cli

MUTATING = {"create", "clone", "delete", "stop", "edit", "start", "rename", "protect"}


def test_an_unknown_template_is_blocked_and_nothing_runs(tmp_path) -> None:
    cli = Cli(tmp_path)
    cli.write("  - name: a\n    image: debian-99\n")
    text = cli.manifest.read_text()
    row = next(i for i, ln in enumerate(text.splitlines(), 1) if "debian-99" in ln)
    cli.standin.clear_log()
    res = cli.sand("plan")
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"sand.yaml:{row}:" in res.stdout and "no template 'debian-99'" in res.stdout
    apply = cli.sand("apply", "--auto-approve")
    assert apply.returncode == 1
    mutating = [
        i.argv for i in cli.standin.invocations()
        if i.command in MUTATING and "--list-templates" not in i.argv
    ]  # fmt: skip
    assert mutating == [] and cli.standin.instances() == []


def test_one_preflight_call_however_many_vms_change(tmp_path) -> None:
    cli = Cli(tmp_path)
    cli.write("".join(f"  - name: v{i}\n" for i in range(6)))
    cli.standin.clear_log()
    assert cli.sand("plan").returncode == 0
    # The listing, then one preflight script: `create --list-templates` once, nothing else.
    assert [c for c in cli.standin.commands() if c] == ["list", "create"]
    assert any("--list-templates" in i.argv for i in cli.standin.invocations())


def test_more_memory_than_the_host_has_is_blocked(tmp_path) -> None:
    cli = Cli(tmp_path)
    cli.write("  - name: a\n    memory: 4TiB\n")
    res = cli.sand("plan")
    assert res.returncode == 1 and "is more than this machine has" in res.stdout, res.stdout


def test_a_missing_image_file_is_blocked(tmp_path) -> None:
    cli = Cli(tmp_path)
    cli.write(f"  - name: a\n    image: {tmp_path}/nope.qcow2\n")
    res = cli.sand("plan")
    assert res.returncode == 1 and "file is not readable" in res.stdout, res.stdout


def test_replace_creates_first_then_renames(tmp_path) -> None:
    cli = Cli(tmp_path)
    cli.write("  - name: a\n")
    assert cli.sand("apply", "--auto-approve").returncode == 0
    uid_before = json.loads((cli.standin.instance_dir("a") / "sand-marker.json").read_text())["uid"]
    cli.write("  - name: a\n    image: debian-13\n")
    cli.standin.clear_log()
    # No guest behind the stand-in's instances to sweep: the guard has tests of its own.
    res = cli.sand("apply", "--auto-approve", "--allow-data-loss")
    assert res.returncode == 0, res.stdout + res.stderr
    calls = [(i.command, [a for a in i.argv if not a.startswith("-")]) for i in
             cli.standin.invocations()]  # fmt: skip
    made = next(n for n, (c, args) in enumerate(calls) if c == "create")
    gone = next(n for n, (c, args) in enumerate(calls) if c == "delete" and "a" in args)
    renamed = next(n for n, (c, args) in enumerate(calls) if c == "rename")
    assert made < gone < renamed
    assert sorted(n for n in cli.standin.instances() if not n.startswith("sand-base")) == ["a"]
    marker = json.loads((cli.standin.instance_dir("a") / "sand-marker.json").read_text())
    assert marker["identity"] == "a" and marker["name"] == "a" and marker["uid"] != uid_before
    assert cli.standin.read_yaml("a")["param"]["sandInstance"] == "a"
    assert cli.sand("plan", "--detailed-exitcode").returncode == 0


def test_a_replacement_that_fails_to_start_leaves_the_old_instance(tmp_path) -> None:
    cli = Cli(tmp_path)
    cli.write("  - name: a\n")
    assert cli.sand("apply", "--auto-approve").returncode == 0
    old = cli.standin.read_yaml("a")
    cli.write("  - name: a\n    image: debian-13\n")
    cli.standin.fail("start", "did not receive an event with the running status")
    res = cli.sand("apply", "--auto-approve", "--allow-data-loss")
    assert res.returncode == 1, res.stdout + res.stderr
    names = [n for n in cli.standin.instances() if not n.startswith("sand-base")]
    assert names == ["a"] and cli.standin.read_yaml("a") == old
    assert {i["name"]: i["status"] for i in cli.standin.list_json("a")} == {"a": "Running"}
