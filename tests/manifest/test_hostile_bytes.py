"""Hostile bytes and hostile structure, through the real ``python -m sand validate``:
a bad byte is located at its line and column (not ``1:1``), a cause reached through
many aliases is said once, and an alias or merge-key bomb is refused before anything
is expanded."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

GOOD = (
    "apiVersion: sand/v1\nproject: demo\nbackends:\n  laptop:\n    type: lima\n"
    "vms:\n  - name: dev\n    image: debian-12\n  - name: dev2\n    image: debian-12\n"
)


def within_a_gigabyte() -> None:
    """A child's ``preexec_fn``: a bomb that got through fails on memory, not the host."""
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def validate(tmp_path: Path, content: bytes) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "sand.yaml"
    path.write_bytes(content)
    return subprocess.run(
        [sys.executable, "-m", "sand", "validate", "sand.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        preexec_fn=within_a_gigabyte,
        timeout=120,  # a guard for a bomb that got through, not a speed target
        check=False,
    )


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        (b"\xff", "not UTF-8: byte 0xff"),
        (b"\x00", "character U+0000 is not allowed"),
        (b"\x1b", "character U+001B is not allowed"),
    ],
)
def test_a_bad_byte_is_located_where_it_stands(tmp_path, bad, says):
    proc = validate(tmp_path, GOOD.encode() + b"  - name: d" + bad + b"3\n    image: debian-12\n")
    assert proc.returncode == 1
    first = proc.stderr.splitlines()[0]
    assert first.startswith(f"sand.yaml:11:12: {says}"), proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_mapping_reached_through_many_aliases_is_one_problem(tmp_path):
    text = (
        "apiVersion: sand/v1\nproject: demo\nbackends:\n  laptop:\n    type: lima\n"
        "base: &c {image: debian-12, name: x}\n"
        "vms:\n  - &b {<<: *c, name: v0, cpus: 2, cpus: 3}\n" + "  - *b\n" * 98
    )
    proc = validate(tmp_path, text.encode())
    assert proc.returncode == 1
    problems = [line for line in proc.stderr.splitlines() if line.startswith("sand.yaml:")]
    assert problems.count("sand.yaml:8:36: duplicate key 'cpus'") == 1, proc.stderr
    assert not [p for p in problems if "duplicate key 'name'" in p], proc.stderr  # merged in
    assert len(problems) == len(set(problems)) and len(problems) <= 3, proc.stderr


@pytest.mark.parametrize(
    "bomb",
    [
        # Billion laughs: ten aliases of ten aliases ... 10**30 values.
        "l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n"
        + "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 30)),
        # Merge keys copy whole mappings before a value is built: 10**30 keys.
        "m0: &m0 {a: 1, b: 2, c: 3, d: 4, e: 5, f: 6, g: 7, h: 8, i: 9, j: 10}\n"
        + "".join(
            f"m{i}: &m{i} {{<<: [{', '.join([f'*m{i - 1}'] * 10)}], k{i}: 1}}\n"
            for i in range(1, 30)
        ),
    ],
    ids=["aliases", "merge-keys"],
)
def test_a_bomb_is_refused_before_it_is_expanded(tmp_path, bomb):
    text = "apiVersion: sand/v1\nproject: demo\nbackends:\n  laptop:\n    type: lima\n"
    proc = validate(tmp_path, (text + bomb + "vms: []\n").encode())
    assert proc.returncode == 1
    assert "expands to more than 200000 values through its aliases" in proc.stderr
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr


def test_a_long_manifest_without_an_alias_is_told_its_own_error(tmp_path):
    # 130,000 VMs write some 390,000 values themselves: no alias adds one, so this is no
    # bomb. The guard counted the file's own values and called it one, at the list's
    # start, hiding the real mistake at the end.
    text = "apiVersion: sand/v1\nproject: demo\nbackends:\n  laptop:\n    type: lima\nvms:\n"
    text += "".join(f"  - name: vm-{i:06d}\n" for i in range(130_000))
    text += "  - name: last\n    image: debian-12\n    image: debian-13\n"
    proc = validate(tmp_path, text.encode())
    assert proc.returncode == 1
    assert proc.stderr.startswith("sand.yaml:130009:5: duplicate key 'image'"), proc.stderr[:300]
    assert "alias" not in proc.stderr
