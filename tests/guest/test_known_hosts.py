"""sand's own known_hosts: pins by alias, agrees with a racing pin, forgets."""

from __future__ import annotations

import asyncssh

from sand.guest.ssh import KnownHosts


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


def test_an_address_is_pinned_with_its_port_in_openssh_form(tmp_path):
    from sand.guest.endpoint import GuestEndpoint
    from sand.guest.ssh import host_key_alias

    def ep(port: int, alias: str = "") -> GuestEndpoint:
        return GuestEndpoint("10.0.0.5", port, "claude", "/id", "pin", host_key_alias=alias)

    assert host_key_alias(ep(22)) == "10.0.0.5"
    assert host_key_alias(ep(2222)) == "[10.0.0.5]:2222"
    assert host_key_alias(ep(2222, alias="lima-dev.1")) == "lima-dev.1"  # aliases stay aliases

    hosts = KnownHosts(tmp_path / "known_hosts")
    k22, k2222 = _key(), _key()
    assert hosts.pin("[10.0.0.5]:2222", k2222)
    # The key pinned for port 2222 says nothing about port 22 of the same address...
    assert hosts.keys("10.0.0.5") == []
    assert hosts.pin("10.0.0.5", k22)
    assert [k.public_data for k in hosts.keys("10.0.0.5")] == [k22.public_data]
    assert [k.public_data for k in hosts.keys("[10.0.0.5]:2222")] == [k2222.public_data]
    names = [ln.split()[0] for ln in (tmp_path / "known_hosts").read_text().splitlines()]
    assert sorted(names) == ["10.0.0.5", "[10.0.0.5]:2222"]


def test_old_entries_without_a_port_count_for_port_22_only(tmp_path):
    path = tmp_path / "known_hosts"
    old, legacy22, other = _key(), _key(), _key()
    line = " ".join(old.export_public_key("openssh").decode().split()[:2])
    line22 = " ".join(legacy22.export_public_key("openssh").decode().split()[:2])
    path.write_text(
        f"10.0.0.5 {line}\n"  # OpenSSH's form for port 22
        f"[10.0.0.6]:22 {line22}\n"  # the form an older sand wrote for port 22
        f"@revoked 10.0.0.7 {line}\n|1|c2FsdA==|aGFzaA== {line}\n# 10.0.0.8 {line}\n"
    )
    hosts = KnownHosts(path)
    assert [k.public_data for k in hosts.keys("10.0.0.5")] == [old.public_data]
    assert [k.public_data for k in hosts.keys("[10.0.0.5]:22")] == [old.public_data]
    assert hosts.keys("[10.0.0.5]:2222") == []  # a bare entry never vouches for another port
    assert [k.public_data for k in hosts.keys("10.0.0.6")] == [legacy22.public_data]
    assert not hosts.pin("10.0.0.6", other)  # the old pin still holds for port 22
    assert hosts.keys("10.0.0.7") == [] and hosts.keys("10.0.0.8") == []
    hosts.forget("10.0.0.6")
    assert hosts.keys("10.0.0.6") == [] and hosts.keys("[10.0.0.6]:22") == []
