"""git's pkt-line framing, as much of it as the broker reads and writes.

A pkt-line is four hex digits giving its length (the four included), then the
payload; ``0000`` is a flush. A push (``git-receive-pack``) starts with one
command per ref, ``<old-id> <new-id> <ref>``, the first followed by a NUL and the
client's capabilities, then a flush, then the pack (gitprotocol-pack(5)). The
broker reads those commands to decide the push, and answers a refused one the way
receive-pack itself reports a refused ref (``ng <ref> <reason>``), so git prints
the reason beside the branch (gitprotocol-http(5), "Smart Service git-receive-pack").
"""

from __future__ import annotations

from dataclasses import dataclass

from sand.refname import is_object_id

FLUSH = b"0000"
# The most a pkt-line carries (65520 bytes in all, its header included).
MAX_PAYLOAD = 65516
ZERO_ID = frozenset({"0" * 40, "0" * 64})


class PktLineError(ValueError):
    """A request body that is not the pkt-lines git sends."""


@dataclass(frozen=True)
class RefUpdate:
    """One command of a push: ``ref`` moved from ``old`` to ``new`` (all zeros: none)."""

    old: str
    new: str
    ref: str

    @property
    def deletes(self) -> bool:
        return self.new in ZERO_ID


def pkt(payload: bytes) -> bytes:
    if len(payload) > MAX_PAYLOAD:
        raise PktLineError("a pkt-line payload longer than 65516 bytes")
    return f"{len(payload) + 4:04x}".encode() + payload


def read_commands(body: bytes) -> tuple[list[RefUpdate], frozenset[str]]:
    """The ref updates at the head of a receive-pack request, and the client's
    capabilities (those after the first command's NUL)."""
    updates: list[RefUpdate] = []
    capabilities: frozenset[str] = frozenset()
    at = 0
    while True:
        head = body[at : at + 4]
        if len(head) < 4:
            raise PktLineError("the push's commands end before their flush")
        try:
            length = int(head, 16)
        except ValueError:
            raise PktLineError("not a pkt-line length") from None
        if length == 0:
            break
        if length < 4 or at + length > len(body):
            raise PktLineError("a pkt-line runs past the request's end")
        line = body[at + 4 : at + length]
        at += length
        if line.startswith(b"shallow "):
            continue
        if line.startswith(b"push-cert"):
            raise PktLineError("signed pushes are not brokered")
        command, nul, caps = line.partition(b"\x00")
        if nul and not updates:
            capabilities = frozenset(caps.decode("ascii", "replace").split())
        parts = command.rstrip(b"\n").decode("utf-8", "replace").split(" ")
        if len(parts) != 3 or not (is_object_id(parts[0]) and is_object_id(parts[1])):
            raise PktLineError("a push command is not '<old-id> <new-id> <ref>'")
        updates.append(RefUpdate(*parts))
    return updates, capabilities


def refusal(
    updates: list[RefUpdate], reasons: dict[str, str], capabilities: frozenset[str], said: str
) -> bytes:
    """receive-pack's report for a push the broker refused whole: each ref ``ng`` with
    its reason (or the refusal of another of its refs), ``said`` on the sideband."""
    report = pkt(b"unpack ok\n")
    for u in updates:
        why = reasons.get(u.ref) or "another ref of this push was refused"
        report += pkt(f"ng {u.ref} {why}\n".encode())
    report += FLUSH
    if "side-band-64k" not in capabilities and "side-band" not in capabilities:
        return report
    size = 999 if "side-band-64k" not in capabilities else MAX_PAYLOAD - 1
    out = pkt(b"\x02" + said.encode() + b"\n")  # band 2: git prints it as "remote: ..."
    for i in range(0, len(report), size):
        out += pkt(b"\x01" + report[i : i + size])
    return out + FLUSH


def default_branch(advertisement: bytes) -> str | None:
    """The branch HEAD points at, from an upload-pack ref advertisement's
    ``symref=HEAD:refs/heads/<branch>`` capability (protocol v0/v1)."""
    marker = b"symref=HEAD:refs/heads/"
    at = advertisement.find(marker)
    if at < 0:
        return None
    rest = advertisement[at + len(marker) :]
    end = min(
        (i for i in (rest.find(b" "), rest.find(b"\n"), rest.find(b"\x00")) if i >= 0),
        default=len(rest),
    )
    return rest[:end].decode("utf-8", "replace") or None
