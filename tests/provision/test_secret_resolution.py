"""Host-side secret resolution: sources, refusals, and what errors may say."""

from __future__ import annotations

import io
import os
import pickle
import sys
from pathlib import Path

import pytest

from sand.errors import SecretError
from sand.logs import configure, get_logger
from sand.secrets import SecretValue, resolve_secrets, secret_names
from sand.secrets.resolve import MAX_OUTPUT
from tests.provision.helpers import make_vm, manifest, repo, secret

CANARY = "canary-resolve-5b1d2e9f"


def _private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_file_is_read_relative_to_the_manifest_dir_without_its_trailing_newline(tmp_path):
    _private(tmp_path / "token", CANARY + "\n")
    m = manifest("  TOKEN:\n    from: {file: token}\n")
    values = resolve_secrets(m, tmp_path, ["TOKEN"])
    assert values["TOKEN"].reveal() == CANARY


def test_file_path_expands_the_home_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _private(tmp_path / "tok", CANARY)
    m = manifest("  TOKEN:\n    from: {file: ~/tok}\n")
    assert resolve_secrets(m, "/nonexistent", ["TOKEN"])["TOKEN"].reveal() == CANARY


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644, 0o660, 0o601])
def test_file_readable_by_group_or_others_is_refused_with_the_fix(tmp_path, mode):
    path = _private(tmp_path / "token", CANARY)
    path.chmod(mode)
    m = manifest("  TOKEN:\n    from: {file: token}\n")
    with pytest.raises(SecretError) as err:
        resolve_secrets(m, tmp_path, ["TOKEN"])
    message = str(err.value)
    assert str(path) in message
    assert f"chmod 600 {path}" in message
    assert CANARY not in message


def test_missing_file_names_the_secret_and_the_path(tmp_path):
    m = manifest("  TOKEN:\n    from: {file: nope}\n")
    with pytest.raises(SecretError, match=r"'TOKEN'.*nope"):
        resolve_secrets(m, tmp_path, ["TOKEN"])


def test_env_source(monkeypatch, tmp_path):
    monkeypatch.setenv("SAND_TEST_TOKEN", CANARY)
    m = manifest("  TOKEN:\n    from: {env: SAND_TEST_TOKEN}\n")
    assert resolve_secrets(m, tmp_path, ["TOKEN"])["TOKEN"].reveal() == CANARY
    monkeypatch.delenv("SAND_TEST_TOKEN")
    with pytest.raises(SecretError, match="SAND_TEST_TOKEN is not set"):
        resolve_secrets(m, tmp_path, ["TOKEN"])


def test_command_stdout_is_the_value_with_one_trailing_newline_stripped(tmp_path):
    script = f"import sys; sys.stdout.write({CANARY!r} + '\\n\\n')"
    m = manifest(f"  TOKEN:\n    from: {{command: [{sys.executable}, -c, {script!r}]}}\n")
    assert resolve_secrets(m, tmp_path, ["TOKEN"])["TOKEN"].reveal() == CANARY + "\n"


def test_command_is_not_run_through_a_shell(tmp_path):
    marker = tmp_path / "shell-ran"
    m = manifest(f"  TOKEN:\n    from: {{command: [echo, '{CANARY}; touch {marker}']}}\n")
    value = resolve_secrets(m, tmp_path, ["TOKEN"])["TOKEN"].reveal()
    assert value == f"{CANARY}; touch {marker}"
    assert not marker.exists()


def test_failing_command_names_secret_and_status_but_never_its_output(tmp_path):
    script = (
        f"import sys; print({CANARY!r}); print('stderr ' + {CANARY!r}, file=sys.stderr); "
        "sys.exit(3)"
    )
    m = manifest(f"  TOKEN:\n    from: {{command: [{sys.executable}, -c, {script!r}]}}\n")
    with pytest.raises(SecretError) as err:
        resolve_secrets(m, tmp_path, ["TOKEN"])
    message = str(err.value)
    assert "'TOKEN'" in message
    assert "exit status 3" in message
    assert CANARY not in message
    assert CANARY not in repr(err.value)


def test_command_timeout_and_missing_program(tmp_path):
    m = manifest(
        f"  SLOW:\n    from: {{command: [{sys.executable}, -c, 'import time; time.sleep(5)']}}\n"
        "  GONE:\n    from: {command: [/nonexistent/sand-helper]}\n"
    )
    with pytest.raises(SecretError) as err:
        resolve_secrets(m, tmp_path, ["SLOW", "GONE"], timeout=0.2)
    message = str(err.value)
    # Every failing secret is reported, not just the first.
    assert "'SLOW'" in message and "did not finish within 0.2s" in message
    assert "'GONE'" in message and "was not found" in message


# One byte in the side file per 64 KiB chunk written (a one-byte append cannot be torn
# by the kill).
FLOOD = """\
import os, sys
count = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
for _ in range(1024):  # 64 MiB
    os.write(1, b"x" * 65536)  # blocks while the pipe is full: the reader sets the pace
    os.write(count, b".")
"""


def test_a_command_printing_far_more_than_the_cap_is_stopped_early(tmp_path):
    # The child counts what it managed to write: read whole, all 64 MiB would be.
    script, written = tmp_path / "flood.py", tmp_path / "written"
    script.write_text(FLOOD)
    m = manifest(f"  FLOOD:\n    from: {{command: [{sys.executable}, {script}, {written}]}}\n")
    with pytest.raises(SecretError) as err:
        resolve_secrets(m, tmp_path, ["FLOOD"])
    assert written.stat().st_size * 65536 < 4 << 20  # killed long before it could finish
    message = str(err.value)
    assert "'FLOOD'" in message and f"more than {MAX_OUTPUT} bytes" in message
    assert "xxxx" not in message


def test_only_the_requested_secrets_are_resolved(tmp_path):
    marker = tmp_path / "ran"
    m = manifest(
        f"  USED:\n    from: {{command: [echo, {CANARY}]}}\n"
        f"  OTHER:\n    from: {{command: [touch, {marker}]}}\n"
    )
    assert set(resolve_secrets(m, tmp_path, ["USED"])) == {"USED"}
    assert not marker.exists()


def test_secret_names_collects_scoped_secrets_and_repo_tokens_of_provisioned_vms():
    a = make_vm(
        name="a",
        secrets=(secret("API", "~/work"),),
        repos=(repo("app", "https://git.test/app.git", "~/src/app", token="GIT"),),
    )
    off = make_vm(name="off", provision=False, secrets=(secret("UNUSED", "~/x"),))
    assert secret_names([a, off]) == {"API", "GIT"}


def test_undefined_empty_and_too_short_values_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SAND_EMPTY", "")
    monkeypatch.setenv("SAND_SHORT", "abc")
    m = manifest("  EMPTY:\n    from: {env: SAND_EMPTY}\n  SHORT:\n    from: {env: SAND_SHORT}\n")
    with pytest.raises(SecretError) as err:
        resolve_secrets(m, tmp_path, ["EMPTY", "SHORT", "NOPE"])
    message = str(err.value)
    assert "'EMPTY' is empty" in message
    assert "'SHORT' is shorter than 4" in message
    assert "'NOPE' is not defined" in message


def test_secret_value_never_shows_its_value():
    value = SecretValue("TOKEN", CANARY)
    percent = "%s" % value  # noqa: UP031 -- %-formatting is one of the ways to leak
    for text in (repr(value), str(value), f"{value}", percent, repr([value]), f"{value!r}"):
        assert CANARY not in text
    assert value.reveal() == CANARY
    with pytest.raises(TypeError):
        pickle.dumps(value)


def test_resolved_values_are_redacted_from_logs(tmp_path, monkeypatch):
    monkeypatch.setenv("SAND_LOGGED", CANARY + "-logged")
    m = manifest("  TOKEN:\n    from: {env: SAND_LOGGED}\n")
    value = resolve_secrets(m, tmp_path, ["TOKEN"])["TOKEN"]
    out = io.StringIO()
    configure("json", "debug", stream=out)
    get_logger().info("oops", leaked=value.reveal(), message=f"token={value.reveal()}")
    assert CANARY not in out.getvalue()
    assert "[redacted]" in out.getvalue()


def test_a_secret_file_that_is_a_directory_is_refused(tmp_path):
    (tmp_path / "dir").mkdir(mode=0o700)
    os.chmod(tmp_path / "dir", 0o700)
    m = manifest("  TOKEN:\n    from: {file: dir}\n")
    with pytest.raises(SecretError, match="not a regular file"):
        resolve_secrets(m, tmp_path, ["TOKEN"])
