"""sand's own known_hosts: pins by alias, agrees with a racing pin, forgets."""

from __future__ import annotations

import asyncssh

from sand.provision.ssh import KnownHosts


def _key() -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519").convert_to_public()


def test_pin_once_then_refuse_another_key_and_forget(tmp_path):
    hosts = KnownHosts(tmp_path / "known_hosts")
    first, second = _key(), _key()
    assert hosts.keys("lima-dev.1") == []
    assert hosts.pin("lima-dev.1", first)
    assert hosts.pin("lima-dev.1", first)  # the same key again: agreed
    assert not hosts.pin("lima-dev.1", second)  # a different one: refused, not replaced
    assert [k.public_data for k in hosts.keys("lima-dev.1")] == [first.public_data]
    assert hosts.pin("lima-other.2", second)
    # OpenSSH format, readable by `ssh -o HostKeyAlias=... -o UserKnownHostsFile=...`.
    lines = (tmp_path / "known_hosts").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["lima-dev.1", "lima-other.2"]
    assert all(line.split()[1] == "ssh-ed25519" for line in lines)
    assert (tmp_path / "known_hosts").stat().st_mode & 0o777 == 0o600
    hosts.forget("lima-dev.1")
    assert hosts.keys("lima-dev.1") == []
    assert [k.public_data for k in hosts.keys("lima-other.2")] == [second.public_data]
