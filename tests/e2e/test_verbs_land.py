"""sand land against a real guest: a read-only sweep over SSH, hostile branch
names made inside the guest, a stand-in gh on the host, the ledger."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from sand.guest.runner import SshRunner
from sand.verbs import ledger
from sand.verbs.github import Gh
from sand.verbs.land import land
from sand.verbs.target import connect
from tests.verbs.helpers import GhStandin
from tests.verbs.rig_helpers import GIT_SETUP, rig_endpoint, sh

if TYPE_CHECKING:
    from tests.rig.fixtures import MakeGuest


pytestmark = pytest.mark.e2e

HOSTILE = "x;touch${IFS}/tmp/sand-pwned;$(touch${IFS}/tmp/sand-pwned2)"

# Two checkouts whose branches are pushed to a bare repo of their own in the guest,
# remotes then pointed at GitHub; a third whose HEAD names an option-looking branch,
# and a fourth whose HEAD file carries terminal escapes. (One bare repo for both made
# the second push of main fail whenever the two "init" commits fell in different
# seconds and so differed: the test failed now and then under load.)
SETUP = (
    GIT_SETUP
    + r"""
mk() {
	git init -q --bare "$1.remote.git"
	git init -q "$1" && cd "$1" && echo hi > README && git add README && git commit -qm init
	git remote add origin "$1.remote.git" && git push -q origin main
	git remote set-head origin main
	git checkout -qb "$2" && echo "$2" > f && git add f && git commit -qm "work on it"
	git push -q origin "$2:$2"
	git remote set-url origin "$3"
	cd ~
}
mk ~/src/widget feature https://x-access-token:ghs_GUESTTOKEN@github.com/acme/widget.git
mk ~/work/evil "$HOSTILE" git@github.com:acme/evil.git
git init -q ~/opt && cd ~/opt && git commit -q --allow-empty -m init
git update-ref refs/heads/--repo=evil/x HEAD && git symbolic-ref HEAD refs/heads/--repo=evil/x
git init -q ~/esc && cd ~/esc && git commit -q --allow-empty -m init
printf 'ref: refs/heads/\033[2J\033]0;owned\007x\n' > .git/HEAD
echo dirty >> ~/src/widget/README
touch ~/.marker
"""
)


@pytest.fixture(autouse=True)
def state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SAND_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


async def test_land_sweeps_a_real_guest_and_hands_gh_only_checked_names(
    netns_guest: MakeGuest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    guest = netns_guest()
    await sh(guest, f"HOSTILE={HOSTILE!r}\n" + SETUP)
    gh = GhStandin(tmp_path / "bin", created="https://github.com/acme/evil/pull/9")
    ledger_file = tmp_path / "landing.jsonl"
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    endpoint = rig_endpoint(guest)
    async with connect(endpoint) as conn:
        code = await land(
            SshRunner(conn), vm="dev", repo_paths=["~/src/widget"], ledger_file=ledger_file,
            gh=Gh(str(gh.path)), out=out,
        )  # fmt: skip
        assert code == 0
        table = out.getvalue()
        rows = {line.split()[0]: line for line in table.splitlines()[1:]}
        assert set(rows) == {"~/src/widget", "~/work/evil", "~/opt", "~/esc"}
        assert rows["~/src/widget"].split()[1:4] == ["feature", "pushed,", "dirty"]
        assert "(invalid name)" in rows["~/opt"]
        assert "\x1b" not in table and "\x07" not in table
        assert HOSTILE in rows["~/work/evil"]
        # The sweep wrote nothing in the guest: not even an index refresh.
        assert (await sh(guest, "find ~ -newer ~/.marker -not -path ~ -print")).strip() == ""

        # --pr on the shell-looking (but valid) name: one argv item, inert.
        out = io.StringIO()
        await land(
            SshRunner(conn), vm="dev", repo_paths=[], ledger_file=ledger_file,
            gh=Gh(str(gh.path)), out=out, path="~/work/evil", open_pr=True,
        )  # fmt: skip
    create = gh.calls[-1]
    assert create[:2] == ["pr", "create"] and f"--head={HOSTILE}" in create
    assert "--repo=acme/evil" in create
    assert not any("--repo=evil" in a for call in gh.calls for a in call)
    assert not Path("/tmp/sand-pwned").exists() and not Path("/tmp/sand-pwned2").exists()
    assert (await sh(guest, "ls /tmp")).split() == []
    recs = ledger.read(ledger_file)
    last = recs[-1]
    assert (last["action"], last["path"], last["branch"]) == ("pr-create", "~/work/evil", HOSTILE)
    text = ledger_file.read_text()
    assert "GUESTTOKEN" not in text and "GUESTTOKEN" not in table
    assert ledger_file.stat().st_mode & 0o777 == 0o600
