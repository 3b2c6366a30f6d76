"""The pkt-lines the broker reads from a push and writes to refuse one."""

from __future__ import annotations

import pytest

from sand.broker.pktline import FLUSH, PktLineError, default_branch, pkt, read_commands, refusal

OLD, NEW = "1" * 40, "2" * 40


def push(*lines: bytes) -> bytes:
    return b"".join(pkt(line) for line in lines) + FLUSH + b"PACK..."


def test_a_pushs_commands_and_capabilities_are_read_up_to_the_flush() -> None:
    body = push(
        f"{OLD} {NEW} refs/heads/agent/x\0report-status side-band-64k\n".encode(),
        f"{NEW} {'0' * 40} refs/heads/gone\n".encode(),
    )
    updates, caps = read_commands(body)
    assert [(u.ref, u.deletes) for u in updates] == [
        ("refs/heads/agent/x", False),
        ("refs/heads/gone", True),
    ]
    assert caps == {"report-status", "side-band-64k"}


@pytest.mark.parametrize(
    "body",
    [
        pkt(f"{OLD} {NEW} refs/heads/x\n".encode()),  # no flush: cut short
        b"00zz",
        b"0100" + b"x" * 10,  # longer than what follows
        push(b"push-cert\0report-status\n"),
        push(b"not a command\n"),
    ],
)
def test_what_is_not_a_push_git_sends_is_refused(body: bytes) -> None:
    with pytest.raises(PktLineError):
        read_commands(body)


def test_a_refusal_reports_every_ref_ng_on_the_sideband_git_asked_for() -> None:
    updates, caps = read_commands(
        push(
            f"{OLD} {NEW} refs/heads/main\0report-status side-band-64k\n".encode(),
            f"{OLD} {NEW} refs/heads/agent/x\n".encode(),
        )
    )
    out = refusal(updates, {"refs/heads/main": "no"}, caps, "sand broker: push refused")
    assert out.startswith(pkt(b"\x02sand broker: push refused\n"))
    assert b"\x01" + pkt(b"unpack ok\n") in out
    assert pkt(b"ng refs/heads/main no\n") in out
    assert pkt(b"ng refs/heads/agent/x another ref of this push was refused\n") in out
    plain = refusal(updates, {"refs/heads/main": "no"}, frozenset({"report-status"}), "x")
    assert plain.startswith(pkt(b"unpack ok\n")) and plain.endswith(FLUSH)


def test_the_default_branch_is_read_from_the_advertisements_symref() -> None:
    advert = pkt(f"{OLD} HEAD\0multi_ack symref=HEAD:refs/heads/trunk agent=git/2\n".encode())
    assert default_branch(b"001e# service=git-upload-pack\n0000" + advert) == "trunk"
    assert default_branch(pkt(f"{OLD} HEAD\0multi_ack\n".encode())) is None
