"""The stand-in keeps Lima's contract (messages, exit codes, JSON Lines), so tests of sand
against it mean something. Each case cites the Lima behaviour it mirrors."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.limactl_standin import StandIn, log_messages

LIMA_FIELDS = {
    "name", "hostname", "status", "dir", "vmType", "arch", "cpus", "memory", "disk",
    "sshLocalPort", "sshConfigFile", "config", "sshAddress", "protected", "limaVersion",
    "HostOS", "HostArch", "LimaHome", "IdentityFile",
}  # fmt: skip


def test_list_with_no_instances_warns_and_succeeds(standin: StandIn) -> None:
    res = standin.run("list", "--json")
    assert res.returncode == 0 and res.stdout == ""
    assert "No instance found" in res.stderr


def test_list_is_json_lines_with_lima_field_names(standin: StandIn) -> None:
    standin.make_instance("a", {"cpus": 1})
    standin.make_instance("b", {"cpus": 2, "memory": "1GiB"})
    standin.run("start", "b")
    res = standin.run("list", "--json")
    lines = res.stdout.splitlines()
    assert len(lines) == 2
    objs = [json.loads(line) for line in lines]
    assert [o["name"] for o in objs] == ["a", "b"]
    assert set(objs[1]) >= LIMA_FIELDS
    assert objs[1]["status"] == "Running" and objs[0]["status"] == "Stopped"
    assert objs[1]["memory"] == 1 << 30 and objs[1]["hostname"] == "lima-b"
    assert isinstance(objs[0]["protected"], bool)

    def no_empty_maps(v: object) -> bool:
        if isinstance(v, dict):
            return bool(v) and all(no_empty_maps(x) for x in v.values())
        if isinstance(v, list):
            return all(no_empty_maps(x) for x in v)
        return True

    assert all(no_empty_maps(o) for o in objs)


def test_list_of_an_unknown_name_fails(standin: StandIn) -> None:
    standin.make_instance("a")
    res = standin.run("list", "--json", "a", "nope", check=False)
    assert res.returncode == 1 and "No instance matching nope found." in res.stderr
    assert [json.loads(x)["name"] for x in res.stdout.splitlines()] == ["a"]


def test_mid_clone_directory_is_broken_or_fails_on_old_lima(standin: StandIn) -> None:
    standin.make_instance("a")
    (standin.lima_home / "b").mkdir()
    (_, obj_b) = standin.list_json()
    assert obj_b["status"] == "Broken" and "lima.yaml" in obj_b["errors"][0]
    assert "config" not in obj_b
    standin.configure(version="2.1.1")
    res = standin.run("list", "--json", check=False)
    assert res.returncode == 1 and res.stdout == "" and "unable to load instance b" in res.stderr


def test_tty_flags(standin: StandIn) -> None:
    res = standin.run("--tty", "list", check=False)  # the last --tty wins, as in cobra
    assert res.returncode == 1 and "require_tty_false" in res.stderr
    proc = standin.run("-y", "list", check=False)
    assert proc.returncode == 1 and "cannot use both --tty and --yes" in proc.stderr
    bare = subprocess.run(
        [str(standin.executable), "list"], env=standin.env(), capture_output=True, text=True
    )
    assert bare.returncode == 1 and "require_tty_false" in bare.stderr
    standin.configure(require_tty_false=False)
    bare = subprocess.run(
        [str(standin.executable), "create", "--name=x", "-"],
        env=standin.env(),
        input="{}",
        capture_output=True,
        text=True,
    )
    assert bare.returncode == 0  # stdin templates imply --tty=false
    res = standin.run("--tty=true", "create", "--name=y", "-", input="{}", check=False)
    assert res.returncode == 1


def test_create_from_stdin_needs_a_name_and_refuses_duplicates(standin: StandIn) -> None:
    res = standin.run("create", "-", input="{}", check=False)
    assert res.returncode == 1 and "must pass instance name with --name" in res.stderr
    standin.run("create", "--name=a", "-", input="{}")
    res = standin.run("create", "--name=a", "-", input="{}", check=False)
    assert res.returncode == 1 and "already exists" in res.stderr
    res = standin.run("create", "--name=bad/name", "-", input="{}", check=False)
    assert res.returncode == 1 and "not a valid identifier" in res.stderr


def test_templates_pull_in_the_home_mount(standin: StandIn) -> None:
    # templates/debian-12.yaml: base _images/debian-12 + _default/mounts (home, read-only);
    # Lima appends a base's lists, so a `mounts: []` in the file does not remove it.
    standin.run("create", "--name=a", "-", input="base: [template:debian-12]\nmounts: []\n")
    assert standin.read_yaml("a")["mounts"] == [{"location": "~"}]
    standin.run("create", "--name=b", "--set=.mounts = []", "-", input="base: template:debian-12\n")
    assert standin.read_yaml("b")["mounts"] == []
    assert standin.read_yaml("b")["images"][0]["location"].endswith("debian-12-amd64.qcow2")


def test_params_must_be_used(standin: StandIn) -> None:
    res = standin.run("create", "--name=a", "-", input="param: {x: y}\n", check=False)
    assert res.returncode == 1 and "not used in any provision" in res.stderr
    body = "param: {x: y}\nprovision: [{mode: system, script: 'echo $PARAM_x'}]\n"
    standin.run("create", "--name=a", "-", input=body)


def test_state_rules(standin: StandIn) -> None:
    standin.make_instance("a", {"disk": "20GiB"})
    res = standin.run("stop", "a", check=False)
    assert res.returncode == 1
    assert 'expected status "Running", got "Stopped"' in log_messages(res.stderr)[-1]
    standin.run("start", "a")
    for args, msg in (
        (("clone", "a", "b"), "cannot clone a running instance"),
        (("edit", "a", "--cpus=2"), "cannot edit a running instance"),
        (("delete", "a"), 'expected status "Stopped", got "Running"'),
    ):
        res = standin.run(*args, check=False)
        assert res.returncode == 1 and msg in log_messages(res.stderr)[-1], (args, res.stderr)
    standin.run("stop", "a")
    res = standin.run("edit", "a", "--disk=10", check=False)
    assert res.returncode == 1 and "shrinking the disk" in res.stderr
    standin.run("protect", "a")
    res = standin.run("delete", "--force", "a", check=False)
    assert res.returncode == 1 and "protected" in res.stderr
    res = standin.run("delete", "ghost")
    assert "Ignoring non-existent instance" in res.stderr


def test_clone_copies_everything_but_protection_and_pid_files(standin: StandIn) -> None:
    d = standin.make_instance("a", {"cpus": 1}, files=("sand-marker.json", "x.pid", "y.sock"))
    standin.run("protect", "a")
    standin.run("clone", "a", "b", "--set=.cpus = 3")
    b = standin.instance_dir("b")
    assert (b / "sand-marker.json").exists() and (b / "lima.yaml").exists()
    assert not (b / "protected").exists() and not (b / "x.pid").exists()
    assert not (b / "y.sock").exists()
    assert standin.read_yaml("b")["cpus"] == 3 and (d / "protected").exists()
    res = standin.run("clone", "a", "b", check=False)
    assert res.returncode == 1 and "already exists" in res.stderr


def test_a_dir_without_lima_yaml_is_not_deleted(standin: StandIn) -> None:
    (standin.lima_home / "half").mkdir()
    res = standin.run("delete", "--force", "half", check=False)
    assert res.returncode == 1 and "NOT deleted" in res.stderr
    assert (standin.lima_home / "half").exists()


def test_set_accepts_only_path_assignments(standin: StandIn) -> None:
    standin.make_instance("a")
    res = standin.run("edit", "a", "--set=.mounts += [{}]", check=False)
    assert res.returncode == 1 and "stand-in supports only" in res.stderr
    res = standin.run("edit", "a", "--set=.cpus = two", check=False)
    assert res.returncode == 1 and "not JSON" in res.stderr
    standin.run("edit", "a", '--set=.ssh.forwardAgent = false | .param["k"] = "v"', check=False)


@pytest.mark.parametrize("command", ["list", "start", "create", "clone", "stop", "delete"])
def test_faults_are_injectable(standin: StandIn, command: str) -> None:
    standin.make_instance("a")
    if command == "stop":
        standin.run("start", "a")
    standin.fail(command, "injected failure")
    args = {
        "list": ("list", "--json"),
        "start": ("start", "a"),
        "create": ("create", "--name=b", "-"),
        "clone": ("clone", "a", "c"),
        "stop": ("stop", "a"),
        "delete": ("delete", "a"),
    }[command]
    res = standin.run(*args, check=False, input="{}")
    assert res.returncode == 1 and "injected failure" in res.stderr


def test_every_invocation_is_logged(standin: StandIn) -> None:
    standin.run("list", "--json")
    standin.run("--version")
    (first, second) = standin.invocations()
    assert first.argv == ("--tty=false", "list", "--json") and first.command == "list"
    assert first.lima_home == str(standin.lima_home) and first.time > 0
    assert second.command == "" and "version" in standin.run("--version").stdout
