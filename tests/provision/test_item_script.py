"""The guest's item step, run for real (bash and the bundle's item.sh, a home directory
on this machine): a generated VM with ``itemFile`` gets its work item as
``~/.sand/item.json``, written as data from stdin, never from argv (issue 43, item 4)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from sand.desired import build_desired
from sand.desired.generated import WorkItem
from sand.manifest import parse_manifest
from sand.provision.bundle import Bundle
from sand.provision.item import item_steps
from tests.manifest.test_generators import GENERATED

SCRIPT = Bundle().root / "item.sh"
HOSTILE = "$(touch pwned)`touch pwned2`\x1b[2J\x1b]0;owned\x07\nline two\r\u202e ../../x"


def generated_vm(item_file: bool = True, body: str = HOSTILE):
    text = GENERATED.replace("vm: {memory: 4GiB}", f"itemFile: {str(item_file).lower()}")
    item = WorkItem("acme/app#7", number=7, title="Fix it " + HOSTILE, body=body, url="u")
    state = build_desired(parse_manifest(text), items={"triage": [item]})
    (vm,) = [v for v in state.vms if v.generated is not None]
    return vm


def run_step(home: Path, stdin: bytes) -> subprocess.CompletedProcess[bytes]:
    env = {"HOME": str(home), "PATH": os.environ["PATH"]}
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)], input=stdin, capture_output=True, env=env, cwd=home,
        timeout=30, check=False,
    )  # fmt: skip


def test_the_item_reaches_the_guest_as_a_file_of_data(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    vm = generated_vm()
    (step,) = item_steps(vm)
    assert HOSTILE not in " ".join(step.argv) and "Fix it" not in " ".join(step.argv)
    done = run_step(home, step.stdin)
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"sand:changed work item file\n"
    written = home / ".sand" / "item.json"
    assert json.loads(written.read_text()) == {
        "key": "acme/app#7",
        "number": 7,
        "branch": None,
        "title": "Fix it " + HOSTILE,
        "body": HOSTILE,
        "url": "u",
    }
    raw = written.read_bytes()
    assert b"\x1b" not in raw and b"\x07" not in raw and b"\r" not in raw
    assert oct(written.stat().st_mode & 0o777) == "0o600"
    assert not (home / "pwned").exists() and not (tmp_path / "pwned").exists()
    again = run_step(home, step.stdin)
    assert again.returncode == 0 and again.stdout == b""  # unchanged: nothing written


def test_a_changed_item_is_part_of_the_guest_spec_and_no_item_file_means_no_step() -> None:
    assert generated_vm().guest_fingerprint != generated_vm(body="edited").guest_fingerprint
    plain = generated_vm(item_file=False)
    assert item_steps(plain) == [] and "item" not in plain.guest_content()


def test_a_home_whose_sand_dir_is_a_link_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (step,) = item_steps(generated_vm())
    for target, said in ((tmp_path / "elsewhere", b"outside"), (home / "other", b"link")):
        home.mkdir(exist_ok=True)
        target.mkdir()
        (home / ".sand").unlink(missing_ok=True)
        (home / ".sand").symlink_to(target)
        done = run_step(home, step.stdin)
        assert done.returncode != 0 and said in done.stderr, done.stderr
        assert list(target.iterdir()) == []


def test_a_truncated_payload_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (step,) = item_steps(generated_vm())
    done = run_step(home, step.stdin[: len(step.stdin) // 2])
    assert done.returncode != 0 and b"truncated" in done.stderr
    assert not (home / ".sand" / "item.json").exists()
