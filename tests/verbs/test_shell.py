"""The argv sand shell hands to the system ssh, and how sand cp reads its arguments."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from sand.cli.guests import split_remote
from sand.errors import TransportError
from sand.guest.endpoint import GuestEndpoint, JumpHost
from sand.verbs.shell import (
    TMUX_SCRIPT,
    jump_config,
    quote_config,
    session_name,
    ssh_argv,
    tmux_command,
)

EP = GuestEndpoint(
    host="10.0.0.5", port=2222, user="claude", identity="/keys/id", host_key_alias="lima-dev"
)
KH = Path("/state dir/known_hosts")


def opts(argv: list[str]) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]


def test_pinned_guest() -> None:
    argv = ssh_argv(EP, known_hosts=KH, alias="lima-dev", ssh="/usr/bin/ssh")
    assert argv[:3] == ["/usr/bin/ssh", "-F", "/dev/null"]
    assert argv[argv.index("-i") + 1] == "/keys/id"
    assert argv[-6:] == ["-p", "2222", "-l", "claude", "--", "10.0.0.5"]
    o = opts(argv)
    for want in (
        "IdentitiesOnly=yes", "IdentityAgent=none", "ForwardAgent=no", "StrictHostKeyChecking=yes",
        'UserKnownHostsFile="/state dir/known_hosts"', "HostKeyAlias=lima-dev",
        "GlobalKnownHostsFile=/dev/null", "ClearAllForwardings=yes",
    ):  # fmt: skip
        assert want in o
    assert "-J" not in argv


def test_policy_none_checks_nothing_and_says_so() -> None:
    ep = GuestEndpoint(host="10.0.0.9", port=22, user="u", identity="/k", host_key_policy="none")
    o = opts(ssh_argv(ep, known_hosts=KH, alias="x", ssh="ssh"))
    assert "StrictHostKeyChecking=no" in o and "UserKnownHostsFile=/dev/null" in o
    assert not any(x.startswith("HostKeyAlias") for x in o)


def test_jump_host_goes_through_a_private_config(tmp_path: Path) -> None:
    jump = JumpHost(host="mac.lan", port=22, user="me", identity="/my key", known_hosts="/kh")
    ep = GuestEndpoint(host="127.0.0.1", port=60022, user="claude", identity="/k", jump=jump)
    cfg = tmp_path / "ssh_config"
    argv = ssh_argv(ep, known_hosts=KH, alias="[127.0.0.1]:60022", config=cfg, ssh="ssh")
    assert argv[1:3] == ["-F", str(cfg)]
    assert argv[argv.index("-J") + 1] == "sand-jump"
    assert jump_config(jump) == (
        "Host sand-jump\n  HostName mac.lan\n  Port 22\n  User me\n"
        '  IdentityFile "/my key"\n  UserKnownHostsFile /kh\n'
    )
    with pytest.raises(ValueError):
        ssh_argv(ep, known_hosts=KH, alias="a", ssh="ssh")


@pytest.mark.parametrize(
    ("vm", "session"), [("dev-1", "dev-1"), ("dev.1", "dev_1"), ("a:b c", "a_b_c"), ("", "sand")]
)
def test_the_tmux_session_is_named_after_the_vm(vm: str, session: str) -> None:
    # tmux reads '.' and ':' in a target as window and pane separators.
    assert session_name(vm) == session


def test_the_interactive_shell_asks_for_a_terminal_and_runs_the_tmux_script() -> None:
    command = tmux_command("dev.1")
    argv = ssh_argv(EP, known_hosts=KH, alias="lima-dev", ssh="ssh", command=command, tty=True)
    assert argv[-8:] == ["-t", "-p", "2222", "-l", "claude", "--", "10.0.0.5", command]
    # One word for the guest's login shell, which splits it back into exactly this.
    assert shlex.split(command) == ["/bin/sh", "-c", TMUX_SCRIPT, "sand-shell", "dev_1", "attach"]
    assert shlex.split(tmux_command("dev.1", new=True))[-1] == "new"
    assert "-t" not in ssh_argv(EP, known_hosts=KH, alias="lima-dev", ssh="ssh", command=command)


@pytest.mark.parametrize("value", ['a"b', "a\nb", ""])
def test_values_ssh_would_misread_are_refused(value: str) -> None:
    with pytest.raises(TransportError):
        quote_config(value)


def test_an_unknown_policy_or_odd_alias_is_refused() -> None:
    with pytest.raises(TransportError):
        ssh_argv(EP, known_hosts=KH, alias="a b", ssh="ssh")
    ep = GuestEndpoint(host="h", port=22, user="u", identity="/k", host_key_policy="tofu")
    with pytest.raises(TransportError):
        ssh_argv(ep, known_hosts=KH, alias="a", ssh="ssh")


@pytest.mark.parametrize(
    ("arg", "split"),
    [
        ("dev:~/src", ("dev", "~/src")),
        ("dev:", ("dev", "~")),
        ("dev.1:/etc/x", ("dev.1", "/etc/x")),
        ("./dev:x", (None, "./dev:x")),
        ("/abs/a:b", (None, "/abs/a:b")),
        ("plain", (None, "plain")),
    ],
)
def test_cp_arguments(arg: str, split: tuple[str | None, str]) -> None:
    assert split_remote(arg) == split
