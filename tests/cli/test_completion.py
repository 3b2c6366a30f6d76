"""``sand completion``: the bash script, sourced in a real bash, completes the
subcommands, file names where a file goes, the manifest's VM names wherever a VM goes
(``--target``, ``--replace``, ``reset``, cp's ``VM:`` side), and so does the fish
script in a real fish (``complete -C``) and the zsh script in a real interactive zsh
on a pseudo-terminal."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.helpers import Sand

MANIFEST = {
    "apiVersion": "sand/v1",
    "project": "demo",
    "backends": {"laptop": {"type": "lima"}},
    "vms": [
        {"name": "agent-1", "backend": "laptop", "image": "debian-13"},
        {"name": "agent-2", "backend": "laptop", "image": "debian-13"},
        {"name": "web", "backend": "laptop", "image": "debian-13"},
    ],
}


@pytest.fixture
def shell_env(tmp_path: Path) -> tuple[Sand, Path]:
    """A workdir with a manifest, and a ``sand`` on PATH that is this checkout's."""
    sand = Sand(tmp_path)
    sand.write(MANIFEST)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "sand"
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} -m sand "$@"\n')
    wrapper.chmod(0o755)
    return sand, bin_dir


def script(sand: Sand, shell: str) -> str:
    proc = sand.run("completion", shell)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    return proc.stdout


def bash_complete(sand: Sand, bin_dir: Path, words: list[str]) -> list[str]:
    """What the sourced script offers for ``words`` (the last one is being typed)."""
    path = sand.workdir / "sand.bash"
    path.write_text(script(sand, "bash"))
    quoted = " ".join(f"'{w}'" for w in words)
    probe = (
        f"source {path}\n"
        "complete -p sand\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}\n"
        'fn=$(complete -p sand | sed -E "s/.*-F ([^ ]+).*/\\1/")\n'
        '"$fn"\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    proc = subprocess.run(
        ["bash", "-c", probe],
        cwd=sand.workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("complete ") and lines[0].endswith(" sand")
    return sorted(line for line in lines[1:] if line)


def fish_completer(sand: Sand, bin_dir: Path) -> Callable[[str], list[str]]:
    """What the sourced fish script offers for a line: fish's own ``complete -C``."""
    path = sand.workdir / "sand.fish"
    path.write_text(script(sand, "fish"))

    def offered(line: str) -> list[str]:
        proc = subprocess.run(
            ["fish", "--no-config", "-c", f"source {path}; complete -C '{line}'"],
            cwd=sand.workdir,
            env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        return sorted(row.split("\t")[0] for row in proc.stdout.splitlines())

    return offered


def test_bash_completes_subcommands(shell_env):
    sand, bin_dir = shell_env
    words = ["schema", "shell", "sleep", "status", "sync"]
    assert bash_complete(sand, bin_dir, ["sand", "s"]) == words
    assert "completion" in bash_complete(sand, bin_dir, ["sand", ""])
    assert "__complete-vms" not in bash_complete(sand, bin_dir, ["sand", ""])
    assert "--auto-approve" in bash_complete(sand, bin_dir, ["sand", "apply", "--a"])


def test_bash_completes_vm_names_from_the_manifest(shell_env):
    sand, bin_dir = shell_env
    assert bash_complete(sand, bin_dir, ["sand", "shell", "ag"]) == ["agent-1", "agent-2"]
    assert bash_complete(sand, bin_dir, ["sand", "land", ""]) == ["agent-1", "agent-2", "web"]
    # -f names another manifest: its VMs, not ./sand.yaml's.
    other = sand.workdir / "other.yaml"
    other.write_text(sand.manifest.read_text().replace("agent-", "bot-"))
    words = ["sand", "shell", "-f", "other.yaml", "b"]
    assert bash_complete(sand, bin_dir, words) == ["bot-1", "bot-2"]


def test_an_unreadable_manifest_completes_to_nothing(shell_env):
    sand, bin_dir = shell_env
    sand.manifest.write_text("vms: [\n")
    assert bash_complete(sand, bin_dir, ["sand", "shell", ""]) == []
    proc = sand.run("__complete-vms", "sand", "shell")
    assert proc.returncode == 0 and proc.stdout == "" and proc.stderr == ""


@pytest.mark.parametrize("shell", ["zsh", "fish"])
def test_zsh_and_fish_scripts_parse(shell_env, shell):
    sand, _ = shell_env
    text = script(sand, shell)
    assert "__complete-vms" in text  # VM names come from the manifest there too
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed (scripts/bootstrap installs it)")
    path = sand.workdir / f"sand.{shell}"
    path.write_text(text)
    proc = subprocess.run([shell, "-n", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def test_fish_completes_subcommands_and_vm_names(shell_env):
    sand, bin_dir = shell_env
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed (scripts/bootstrap installs it)")
    (sand.workdir / "other.yaml").write_text(sand.manifest.read_text().replace("agent-", "bot-"))
    offered = fish_completer(sand, bin_dir)

    assert offered("sand st") == ["status"]
    assert offered("sand shell ") == ["agent-1", "agent-2", "web"]
    assert offered("sand land -f other.yaml b") == ["bot-1", "bot-2"]


def test_bash_completes_file_names_where_a_file_goes(shell_env):
    sand, bin_dir = shell_env
    for name in ("team.yaml", "team-b.yaml"):
        (sand.workdir / name).write_text(sand.manifest.read_text())
    both = ["team-b.yaml", "team.yaml"]
    for words in (
        ["sand", "validate", "te"],
        ["sand", "validate", "team.yaml", "te"],
        ["sand", "plan", "te"],
        ["sand", "plan", "-f", "te"],
        ["sand", "apply", "--manifest", "te"],
        ["sand", "shell", "-f", "te"],
        ["sand", "plan", "--out", "te"],
    ):
        assert bash_complete(sand, bin_dir, words) == both, words


def test_bash_completes_vm_names_wherever_a_vm_goes(shell_env):
    sand, bin_dir = shell_env
    (sand.workdir / "agenda.txt").write_text("")
    for words in (
        ["sand", "apply", "--target", "ag"],
        ["sand", "plan", "--replace", "ag"],
        ["sand", "reset", "ag"],
        ["sand", "wake", "ag"],
        ["sand", "sleep", "--stop", "ag"],
    ):
        assert bash_complete(sand, bin_dir, words) == ["agent-1", "agent-2"], words
    # cp: a host path or VM:PATH, either side.
    expected = ["agenda.txt", "agent-1:", "agent-2:"]
    assert bash_complete(sand, bin_dir, ["sand", "cp", "ag"]) == expected
    assert bash_complete(sand, bin_dir, ["sand", "cp", "agenda.txt", "ag"]) == expected


def test_fish_completes_file_names_and_cp_sides(shell_env):
    sand, bin_dir = shell_env
    if shutil.which("fish") is None:
        pytest.skip("fish is not installed (scripts/bootstrap installs it)")
    (sand.workdir / "team.yaml").write_text(sand.manifest.read_text())
    offered = fish_completer(sand, bin_dir)

    assert offered("sand validate te") == ["team.yaml"]
    assert offered("sand plan -f te") == ["team.yaml"]
    assert offered("sand apply --target ag") == ["agent-1", "agent-2"]
    assert offered("sand reset w") == ["web"]
    assert offered("sand cp ag") == ["agent-1:", "agent-2:"]
    assert offered("sand cp te") == ["team.yaml"]


@contextlib.contextmanager
def zsh_completer(sand: Sand, bin_dir: Path) -> Iterator[Callable[[str, str], bool]]:
    """A real interactive zsh on a pseudo-terminal, with the script on its fpath and
    compinit run: ``completes(line, expected)`` types ``line``, a TAB, and says whether
    the line then reads ``expected`` (zsh completes a single match in place)."""
    import pty
    import select

    fpath = sand.workdir / "zfuncs"
    fpath.mkdir()
    (fpath / "_sand").write_text(script(sand, "zsh"))
    pid, fd = pty.fork()
    if pid == 0:  # the child: a clean zsh, this checkout's sand on PATH
        os.environ.update(PATH=f"{bin_dir}:{os.environ['PATH']}", TERM="dumb")
        os.environ["HOME"] = str(sand.workdir)
        os.chdir(sand.workdir)
        os.execvp("zsh", ["zsh", "-f", "-i"])

    def read_until(words: str) -> bool:
        seen, deadline = "", time.monotonic() + 30  # a guard, not a speed target
        while words not in seen and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                seen += os.read(fd, 65536).decode(errors="replace")
        return words in seen

    os.write(fd, f"fpath=({fpath} $fpath); autoload -U compinit; compinit -u\n".encode())
    os.write(fd, b"echo ready-$((6*7))\n")
    ready = read_until("ready-42")

    def completes(line: str, expected: str) -> bool:
        os.write(fd, b"\x15" + line.encode() + b"\t")  # Ctrl-U clears the last line
        return read_until(expected)

    try:
        assert ready, "zsh did not start"
        yield completes
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def test_zsh_completes_files_and_vm_names(shell_env):
    sand, bin_dir = shell_env
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed (scripts/bootstrap installs it)")
    (sand.workdir / "team.yaml").write_text(sand.manifest.read_text())
    with zsh_completer(sand, bin_dir) as completes:
        assert completes("sand validate te", "sand validate team.yaml ")
        assert completes("sand plan -f te", "sand plan -f team.yaml ")
        assert completes("sand apply --target we", "sand apply --target web ")
        assert completes("sand reset we", "sand reset web ")
        assert completes("sand cp we", "sand cp web:")
        assert completes("sand cp te", "sand cp team.yaml ")
