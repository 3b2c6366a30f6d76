"""The guest's repos step, run for real: bash, git and a file:// origin on this machine.

The payload is written by hand, as a host that skipped every Python check
would send it, so what is proven here is the script's own defence: '--'
before every git operand (each git argv is recorded by a PATH wrapper that
then runs the real git), option-like and transport URLs refused, git kept
to plain transports, branches checked with git's rules, and no checkout
outside the home directory, through '..' or a symlink.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from sand.desired.spec import DesiredRepo
from sand.provision.bundle import Bundle
from sand.provision.steps import fields, repos_step
from tests.provision.helpers import make_vm
from tests.required import require
from tests.rig.gitserver import GitServer

GIT = shutil.which("git")


@pytest.fixture(autouse=True)
def _git() -> None:
    require(GIT is not None, "needs git")


SCRIPT = Bundle().root / "repos.sh"
ARG, END = "\x1f", "\x1e"


class Guest:
    """A home directory, an origin repository and the argv of every git call."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home" / "claude"
        self.home.mkdir(parents=True)
        self.outside = root / "outside"
        self.outside.mkdir()
        self.log = root / "git-argv.log"
        self.bin = root / "bin"
        self.bin.mkdir()
        shim = self.bin / "git"
        shim.write_text(
            "#!/bin/sh\n"
            f'for a in "$@"; do printf "%s{ARG}" "$a"; done >>"$SAND_TEST_GIT_LOG"\n'
            f'printf "{END}" >>"$SAND_TEST_GIT_LOG"\n'
            f'exec {GIT} "$@"\n'
        )
        shim.chmod(0o755)
        self.origin = root / "origin.git"
        work = root / "work"
        self._git("init", "-q", "-b", "main", str(work))
        (work / "README").write_text("hello\n")
        self._git("-C", str(work), "add", "README")
        self._git("-C", str(work), "-c", "user.name=t", "-c", "user.email=t@t",
                  "commit", "-q", "-m", "first")  # fmt: skip
        self._git("clone", "-q", "--bare", str(work), str(self.origin))
        self.url = f"file://{self.origin}"

    def _git(self, *args: str) -> None:
        subprocess.run([GIT or "git", *args], check=True, capture_output=True)

    def run(self, *records: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        return self.run_stdin(fields(*records))

    def run_stdin(self, stdin: bytes) -> subprocess.CompletedProcess[str]:
        env = {
            "HOME": str(self.home),
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "SAND_TEST_GIT_LOG": str(self.log),
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        return subprocess.run(
            ["/bin/bash", str(SCRIPT)],
            input=stdin.decode(),
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )

    def argvs(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        raw = self.log.read_text()
        return [call.split(ARG)[:-1] for call in raw.split(END)[:-1]]


@pytest.fixture
def guest(tmp_path: Path) -> Guest:
    return Guest(tmp_path)


def test_a_checkout_puts_dash_dash_before_every_url_path_and_branch(guest: Guest) -> None:
    # The records the host really builds for this repo.
    app = DesiredRepo(name="app", url=guest.url, branch="main", path="~/src/app", token_secret=None)
    proc = guest.run_stdin(repos_step(make_vm(repos=(app,))).stdin)
    assert proc.returncode == 0, proc.stderr
    assert (guest.home / "src" / "app" / "README").read_text() == "hello\n"
    calls = guest.argvs()
    assert calls, "git was never run"
    with_url = [c for c in calls if guest.url in c]
    assert with_url, calls
    for call in with_url:
        assert "--" in call and call.index("--") < call.index(guest.url), call
    checkout = next(c for c in calls if "checkout" in c)
    assert checkout[-1] == "--", checkout  # origin/main is a start point, never a path
    set_head = next(c for c in calls if "set-head" in c)
    assert set_head.index("--") < set_head.index("main"), set_head


@pytest.mark.parametrize(
    "url",
    [
        "--upload-pack=touch {pwned}",
        "-u touch {pwned}",
        "ext::sh -c touch% {pwned}",
        "fd::3",
        "file:///x\n--upload-pack=touch {pwned}",
    ],
)
def test_an_option_or_transport_url_is_refused_before_git_sees_it(guest: Guest, url: str) -> None:
    pwned = guest.root / "pwned"
    proc = guest.run(("repo", "~/src/app", url.format(pwned=pwned), ""))
    assert proc.returncode != 0
    assert "refusing the URL" in proc.stderr
    assert not pwned.exists()
    assert not any(url.format(pwned=pwned) in call for call in guest.argvs())


def test_git_is_kept_to_plain_transports_even_when_config_rewrites_the_url(guest: Guest) -> None:
    """An agent's ~/.gitconfig can rewrite a clean URL into ext::; git refuses to run it."""
    pwned = guest.root / "pwned"
    (guest.home / ".gitconfig").write_text(
        f'[url "ext::sh -c touch% {pwned} "]\n\tinsteadOf = https://evil.test/\n'
        "[protocol]\n\tallow = always\n"
    )
    proc = guest.run(("repo", "~/src/app", "https://evil.test/app.git", "main"))
    assert proc.returncode != 0
    assert not pwned.exists()
    assert "not allowed" in proc.stderr


@pytest.mark.parametrize("branch", ["-x", "--orphan=x", "a..b", "HEAD", "a b"])
def test_a_branch_git_would_refuse_or_read_as_an_option_is_refused(
    guest: Guest, branch: str
) -> None:
    proc = guest.run(("repo", "~/src/app", guest.url, branch))
    assert proc.returncode != 0
    assert "not a usable branch name" in proc.stderr
    assert not (guest.home / "src" / "app").exists()


def test_a_hostile_default_branch_from_the_remote_is_refused(guest: Guest) -> None:
    guest._git("-C", str(guest.origin), "update-ref", "refs/heads/-f", "refs/heads/main")
    guest._git("-C", str(guest.origin), "symbolic-ref", "HEAD", "refs/heads/-f")
    proc = guest.run(("repo", "~/src/app", guest.url, ""))
    assert proc.returncode != 0
    assert "not a usable branch name: -f" in proc.stderr
    assert not any(c[:1] != ["-C"] and "checkout" in c for c in guest.argvs())


@pytest.mark.parametrize(
    "checkout", ["~/../outside/app", "~/src/../../../outside/app", "/tmp/app", "src/app", "~x"]
)
def test_a_checkout_outside_home_is_refused_and_nothing_is_made(
    guest: Guest, checkout: str
) -> None:
    proc = guest.run(("repo", checkout, guest.url, "main"))
    assert proc.returncode != 0
    assert guest.argvs() == []  # refused before any git
    assert list(guest.outside.iterdir()) == []


def test_a_symlink_that_leaves_home_is_refused(guest: Guest) -> None:
    (guest.home / "src").symlink_to(guest.outside)
    proc = guest.run(("repo", "~/src/app", guest.url, "main"))
    assert proc.returncode != 0
    assert "resolves outside" in proc.stderr
    assert list(guest.outside.iterdir()) == []
    # A symlink that stays inside home is fine.
    (guest.home / "src").unlink()
    (guest.home / "work").mkdir()
    (guest.home / "src").symlink_to(guest.home / "work")
    proc = guest.run(("repo", "~/src/app", guest.url, "main"))
    assert proc.returncode == 0, proc.stderr
    assert (guest.home / "work" / "app" / "README").exists()


@pytest.fixture
def forge(guest: Guest) -> Iterator[tuple[GitServer, str]]:
    """The rig's token-protected HTTP git server with one repository (default branch
    ``trunk``), and the guest's git given its token as the secrets step gives it: an
    ``includeIf gitdir`` for the checkout only, a credential helper reading a file."""
    server = GitServer(token="repos-step-token-not-secret", host="127.0.0.1").start()
    try:
        url = server.create_repo("app", {"README": "from the forge\n"}, branch="trunk")
        token = guest.root / "token"
        token.write_text(server.token + "\n")
        token.chmod(0o600)
        helper = Bundle().root / "git-credential-sand"
        conf = guest.root / "app.gitconfig"
        conf.write_text(
            f'[credential "{url.rsplit("/", 1)[0]}"]\n\thelper =\n\thelper = {helper} {token}\n'
            "\tusername = x-access-token\n"
        )
        (guest.home / ".gitconfig").write_text(
            f'[includeIf "gitdir:{guest.home}/src/app/"]\n\tpath = {conf}\n'
        )
        yield server, url
    finally:
        server.stop()


@pytest.mark.parametrize("scope_first", [False, True], ids=["new-path", "path-with-envrc"])
def test_a_new_checkout_of_the_default_branch_asks_the_forge_once(
    guest: Guest, forge: tuple[GitServer, str], scope_first: bool
) -> None:
    """One connection, one listing of the refs: the clone's own says the remote's default
    branch, where a second connection (`git ls-remote`) asked for it before, at a TLS
    handshake's and a TCG guest's process starts' cost; also when the checkout's
    directory already holds a secret scope's .envrc."""
    server, url = forge
    app = guest.home / "src" / "app"
    if scope_first:
        app.mkdir(parents=True)
        (app / ".envrc").write_text("# sand's scope\n")
    proc = guest.run(("repo", "~/src/app", url, ""))
    assert proc.returncode == 0, proc.stderr
    assert (app / "README").read_text() == "from the forge\n"
    head = subprocess.run(
        [GIT or "git", "-C", str(app), "symbolic-ref", "--short", "HEAD"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert head.stdout.strip() == "trunk"
    assert not any("ls-remote" in call for call in guest.argvs())
    listings = [path for path, ok in server.request_log if path.endswith("/info/refs") and ok]
    assert listings == ["/app.git/info/refs"], server.request_log
    assert server.connections == 1
    if scope_first:
        assert (app / ".envrc").read_text() == "# sand's scope\n"
        assert not (app / ".sand-clone").exists()
        status = subprocess.run(
            [GIT or "git", "-C", str(app), "status", "--porcelain"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert status.stdout == "?? .envrc\n"  # only the scope's file; the clone is whole
    # The token went by the helper only: not in the URL or the checkout's config.
    assert server.token not in (app / ".git" / "config").read_text()


def test_a_hostile_default_branch_leaves_no_checkout_to_keep(guest: Guest) -> None:
    """The clone a refused default branch came with is removed, so the next run refuses
    it again rather than keeping it as the agent's checkout."""
    guest._git("-C", str(guest.origin), "update-ref", "refs/heads/-f", "refs/heads/main")
    guest._git("-C", str(guest.origin), "symbolic-ref", "HEAD", "refs/heads/-f")
    for _ in range(2):
        proc = guest.run(("repo", "~/src/app", guest.url, ""))
        assert proc.returncode != 0
        assert "not a usable branch name: -f" in proc.stderr
        assert not (guest.home / "src" / "app" / ".git").exists()
