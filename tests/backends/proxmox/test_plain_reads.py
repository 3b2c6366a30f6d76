"""Reads (GETs) go over the standard library's HTTP client, not requests
(``sand/backends/proxmox/plainget.py``), and trust exactly what requests trusted:
the CA named in ``ca_file`` alone, else $REQUESTS_CA_BUNDLE / $CURL_CA_BUNDLE, else
certifi's bundle; nothing is checked with ``verify_tls: false``; a proxy the
environment names is never bypassed."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from fakepve.certs import make_cert

from sand.backends.proxmox.client import PveClient
from sand.backends.proxmox.errors import ErrorKind, ProxmoxError
from tests.fakepve_rig.rig import FakePveRig


def _client(rig: FakePveRig, verify: bool | str, host: str = "127.0.0.1") -> PveClient:
    return PveClient("pve", host, rig.port, rig.token_file, verify=verify)


def _another_ca(tmp_path: Path) -> str:
    """A certificate for the same names as fakepve's, from a CA that is not its own."""
    return make_cert(str(tmp_path), name="stranger", hosts=("127.0.0.1",))[0]


async def _refused_for_tls(client: PveClient) -> ProxmoxError:
    with pytest.raises(ProxmoxError) as caught:
        await client.get("cluster/resources", type="vm")
    await client.close()
    return caught.value


async def test_a_read_trusts_the_named_ca_alone(rig: FakePveRig, tmp_path: Path) -> None:
    rig.clear_log()
    refused = await _refused_for_tls(_client(rig, _another_ca(tmp_path)))
    assert refused.kind is ErrorKind.UNREACHABLE and not refused.transient
    assert "TLS verification failed" in str(refused) and "set ca_file" in str(refused)
    assert rig.log == []  # nothing reached the API, the token least of all
    client = _client(rig, rig.ca_file)
    assert isinstance(await client.get("cluster/resources", type="vm"), list)
    await client.close()
    assert [r.path for r in rig.log] == ["/cluster/resources"]


async def test_without_a_ca_file_a_read_trusts_the_ca_bundle_requests_trusted(
    rig: FakePveRig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", _another_ca(tmp_path))
    assert "TLS verification failed" in str(await _refused_for_tls(_client(rig, True)))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", rig.ca_file)
    client = _client(rig, True)
    assert isinstance(await client.get("version"), dict)
    await client.close()
    monkeypatch.delenv("REQUESTS_CA_BUNDLE")
    monkeypatch.setenv("CURL_CA_BUNDLE", str(tmp_path / "no-such-bundle.pem"))
    missing = await _refused_for_tls(_client(rig, True))
    assert "no-such-bundle.pem" in str(missing) and not missing.transient


async def test_verify_tls_false_reads_from_a_certificate_nobody_vouches_for(
    rig: FakePveRig,
) -> None:
    client = _client(rig, False)
    assert isinstance(await client.get("version"), dict)
    await client.close()


async def test_a_proxy_in_the_environment_carries_reads_as_it_carried_them(
    rig: FakePveRig, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as sock:  # a proxy address nothing listens on
        sock.bind(("127.0.0.1", 0))
        proxy = f"http://127.0.0.1:{sock.getsockname()[1]}"
    monkeypatch.setenv("https_proxy", proxy)
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    rig.clear_log()
    client = _client(rig, rig.ca_file)
    with pytest.raises(ProxmoxError) as caught:
        await client.request("GET", "version", retry=False)
    await client.close()
    # The read went to the proxy, as requests sends it, and found nobody there: no
    # request reached the API past it.
    assert caught.value.kind is ErrorKind.UNREACHABLE
    assert rig.log == []
