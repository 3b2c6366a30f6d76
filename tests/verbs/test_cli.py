"""The verbs' command lines: what is refused before any VM is contacted."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from sand.cli.main import main

TOKEN = "glpat-TESTTOKEN-0123456789abcdef"


def test_cli_refuses_a_loose_token_before_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    token = tmp_path / "sand" / "drupalorg.token"
    token.parent.mkdir()
    token.write_text(TOKEN + "\n")
    token.chmod(0o644)
    args = ["publish", "-f", str(tmp_path / "nope.yaml"), "vm", "--issue", "https://x"]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "open to group or others (mode 0644)" in err and TOKEN not in err


def test_cli_refuses_without_a_terminal_unless_yes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    token = tmp_path / "sand" / "drupalorg.token"
    token.parent.mkdir()
    fd = os.open(token, os.O_WRONLY | os.O_CREAT, 0o600)
    os.write(fd, TOKEN.encode())
    os.close(fd)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    url = "https://www.drupal.org/project/widget/issues/123"
    assert main(["publish", "-f", str(tmp_path / "nope.yaml"), "vm", "--issue", url]) == 1
    assert "needs a person to confirm" in capsys.readouterr().err
    # With --yes it goes on (here, to the missing manifest): the check was the TTY one.
    assert main(["publish", "-f", str(tmp_path / "nope.yaml"), "vm", "--issue", url, "--yes"]) == 1
    assert "needs a person" not in capsys.readouterr().err


def test_cp_needs_exactly_one_vm_side(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cp", "a", "b"]) == 1
    assert main(["cp", "x:a", "y:b"]) == 1
    assert capsys.readouterr().err.count("write VM:PATH on one side") == 2


def test_land_takes_one_of_pr_and_web() -> None:
    with pytest.raises(SystemExit) as info:
        main(["land", "vm", "--pr", "--web"])
    assert info.value.code == 1  # a usage error: 2 is "changes pending"


def test_an_unknown_vm_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = tmp_path / "sand.yaml"
    manifest.write_text(
        "apiVersion: sand/v1\nproject: demo\nbackends:\n  laptop:\n    type: lima\n"
        "vms:\n  - name: dev\n    image: debian-12\n"
    )
    assert main(["land", "-f", str(manifest), "nope"]) == 1
    assert "declares no VM named 'nope' (VMs: dev)" in capsys.readouterr().err


def test_raw_is_only_for_a_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["shell", "-f", str(tmp_path / "nope.yaml"), "--raw", "vm"]) == 1
    assert "--raw is for a command" in capsys.readouterr().err


def test_new_is_only_for_the_interactive_shell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = str(tmp_path / "nope.yaml")  # refused before the manifest is read
    assert main(["shell", "-f", manifest, "--new", "vm", "--", "true"]) == 1
    assert "--new is for the interactive shell; -- CMD runs without tmux" in capsys.readouterr().err
    # After VM, argparse would hand it to the guest as a command: refused, with the fix.
    assert main(["shell", "-f", manifest, "vm", "--new"]) == 1
    assert "put --new before the VM: sand shell --new VM" in capsys.readouterr().err
