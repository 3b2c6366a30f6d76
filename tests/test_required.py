"""In CI nothing skips: a missing prerequisite, a plain skip and a skip marker all fail
when SAND_RIG_REQUIRED is set, and skip (with the reason) when it is not."""

from __future__ import annotations

import os

import pytest

INNER_CONFTEST = "from tests.conftest import pytest_runtest_makereport  # noqa: F401\n"
INNER_TESTS = """
import pytest
from tests.required import missing, require

def test_a_missing_tool():
    missing("needs qemu-system-x86_64")

def test_a_false_requirement():
    require(False, "needs root")

def test_a_plain_skip():
    pytest.skip("no reason to run")

@pytest.mark.skipif(True, reason="a marker")
def test_a_skip_marker():
    pass

def test_a_passing_test():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_an_expected_failure():
    raise AssertionError
"""


# The inner sessions run without the cache and without the snapshot plugin.
INNER_ARGS = ("-p", "no:cacheprovider", "-p", "no:textual-snapshot")


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("SAND_RIG_REQUIRED", "CI"):
        monkeypatch.delenv(name, raising=False)
    # pytest-textual-snapshot keeps its session's directory in this variable and removes
    # it when a session ends: an inner session run in this process would point the
    # outer session at the inner's removed directory, and the outer run would crash at
    # its end. monkeypatch puts the outer value back.
    monkeypatch.setenv("TEXTUAL_SNAPSHOT_TEMPDIR", os.environ.get("TEXTUAL_SNAPSHOT_TEMPDIR", ""))
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest(INNER_CONFTEST)
    pytester.makepyfile(test_inner=INNER_TESTS)
    return pytester


@pytest.mark.parametrize("variable", ["SAND_RIG_REQUIRED", "CI"])
def test_with_the_rig_required_every_skip_fails(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "1")
    result = inner.runpytest_inprocess(*INNER_ARGS, "-rA")
    # A skip marker acts at setup: it shows as an error, a failure all the same.
    result.assert_outcomes(failed=3, errors=1, passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*needs qemu-system-x86_64 -- required*", "*needs root*"])
    assert "skipped while SAND_RIG_REQUIRED is set" in result.stdout.str()


def test_without_it_they_skip_with_their_reason(inner: pytest.Pytester) -> None:
    result = inner.runpytest_inprocess(*INNER_ARGS, "-rs")
    result.assert_outcomes(skipped=4, passed=1, xfailed=1)
    result.stdout.fnmatch_lines(["*needs qemu-system-x86_64*", "*a marker*"])


@pytest.mark.parametrize("required", [True, False])
def test_the_rig_fixtures_fail_or_skip_on_a_missing_tool(
    monkeypatch: pytest.MonkeyPatch, required: bool
) -> None:
    from tests.rig.fixtures import _unavailable

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("SAND_RIG_REQUIRED", "1" if required else "")
    outcome = pytest.fail.Exception if required else pytest.skip.Exception
    with pytest.raises(outcome, match="the sand rig needs no-such-tool-0f3a"):
        _unavailable(("no-such-tool-0f3a",))
