"""The token file: refused when group/other may read it; its secret never shows."""

from __future__ import annotations

import pytest

from sand.backends.proxmox.errors import ProxmoxError
from sand.backends.proxmox.token import read_token
from tests.fakepve_rig.rig import FakePveRig


def secret_of(rig: FakePveRig) -> str:
    return rig.token_file.read_text().strip().partition("=")[2]


async def test_a_group_readable_token_file_is_refused_with_the_fix(rig: FakePveRig) -> None:
    rig.token_file.chmod(0o640)
    backend = rig.make_backend()
    with pytest.raises(ProxmoxError) as caught:
        await backend.observe([])
    message = str(caught.value)
    assert message.startswith("proxmox pve: ")
    assert str(rig.token_file) in message
    assert f"chmod 600 {rig.token_file}" in message
    assert secret_of(rig) not in message
    assert rig.count() == 0  # refused before any request
    await backend.close()


@pytest.mark.parametrize("mode", [0o604, 0o660, 0o644, 0o601])
def test_any_group_or_other_bit_is_refused(rig: FakePveRig, mode: int) -> None:
    rig.token_file.chmod(mode)
    with pytest.raises(ProxmoxError, match="chmod 600"):
        read_token(rig.token_file, "pve")


def test_a_malformed_token_file_does_not_echo_its_content(rig: FakePveRig) -> None:
    rig.token_file.write_text("not-a-token-but-a-secret-string\n")
    with pytest.raises(ProxmoxError) as caught:
        read_token(rig.token_file, "pve")
    assert "not-a-token-but-a-secret-string" not in str(caught.value)
    assert "user@realm!tokenid=secret" in str(caught.value)


async def test_the_secret_is_in_no_repr_or_error(rig: FakePveRig) -> None:
    backend = rig.make_backend()
    token = read_token(rig.token_file, "pve")
    secret = secret_of(rig)
    assert token.token_id == rig.token_id
    for text in (repr(token), str(token), repr(backend), repr(backend.ctx.client)):
        assert secret not in text
    rig.fail("GET", "/cluster/resources", 403, "Permission check failed (/, Sys.Audit)")
    with pytest.raises(ProxmoxError) as caught:
        await backend.observe([])
    assert secret not in str(caught.value)
    await backend.close()


async def test_a_wrong_secret_is_a_clear_401(rig: FakePveRig) -> None:
    rig.token_file.write_text(f"{rig.token_id}=00000000-wrong\n")
    backend = rig.make_backend()
    with pytest.raises(ProxmoxError, match=r"401.*token was rejected") as caught:
        await backend.observe([])
    assert not caught.value.transient
    assert rig.count("GET", "/cluster/resources") == 1  # never retried
    await backend.close()
