"""NflogReader: the host's denial log, read as pve-firewall's logger reads it.

pve-firewall logs a dropped packet with ``NFLOG`` (``get_log_rule_base`` in
``src/PVE/Firewall.pm``: the prefix ``:<vmid>:<loglevel>:<chain>: <message>``) and its
daemon ``pvefw-logger`` (``src/pvefw-logger.c``, ``print_pkt``) listens on the netlink
log group and writes each packet as a line of ``/var/log/pve-firewall.log``:
``<vmid> <loglevel> <chain> <dd/Mon/YYYY:HH:MM:SS +zzzz> <message>IN=… SRC=… DST=…
PROTO=… SPT=… DPT=…``, which PVE serves per VM at ``GET …/qemu/{vmid}/firewall/log``.

This reader does the same for the rig's nftables ``log group N`` rules (the kernel log a
container cannot read is not needed): it binds a ``NETLINK_NETFILTER`` socket to the
group, copies each packet, and keeps the lines, in that format, for the tests and for the
rig's ``firewall/log`` endpoint.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
import threading
import time
from dataclasses import dataclass

NETLINK_NETFILTER = 12
NFNL_SUBSYS_ULOG = 4
NFULNL_MSG_PACKET, NFULNL_MSG_CONFIG = 0, 1
NFULA_CFG_CMD, NFULA_CFG_MODE = 1, 2
NFULNL_CFG_CMD_BIND, NFULNL_COPY_PACKET = 1, 2
NFULA_TIMESTAMP, NFULA_INDEV, NFULA_PAYLOAD, NFULA_PREFIX = 3, 4, 9, 10
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
PROTOS = {1: "ICMP", 6: "TCP", 17: "UDP", 58: "ICMPV6"}


@dataclass(frozen=True)
class Denial:
    vmid: int
    chain: str
    at: float  # time.time() of the packet
    message: str  # "policy DROP: "
    src: str
    dst: str
    proto: str
    dport: int | None

    def line(self) -> str:
        """The line pvefw-logger writes for it (``print_pkt``)."""
        stamp = time.strftime("%d/%b/%Y:%H:%M:%S %z", time.localtime(self.at))
        port = f" DPT={self.dport}" if self.dport is not None else ""
        return (
            f"{self.vmid} 6 {self.chain} {stamp} {self.message}"
            f"SRC={self.src} DST={self.dst} PROTO={self.proto}{port}"
        )


def _attrs(data: bytes) -> dict[int, bytes]:
    out: dict[int, bytes] = {}
    while len(data) >= 4:
        length, kind = struct.unpack_from("=HH", data)
        if length < 4:
            break
        out[kind & 0x3FFF] = data[4:length]
        data = data[(length + 3) & ~3 :]
    return out


def _message(kind: int, seq: int, family: int, group: int, attrs: bytes) -> bytes:
    body = struct.pack("!BBH", family, 0, group) + attrs
    return struct.pack("=IHHII", 16 + len(body), kind, NLM_F_REQUEST | NLM_F_ACK, seq, 0) + body


def _attr(kind: int, value: bytes) -> bytes:
    raw = struct.pack("=HH", 4 + len(value), kind) + value
    return raw + b"\0" * ((4 - len(raw) % 4) % 4)


def parse_packet(attrs: dict[int, bytes]) -> Denial | None:
    """A logged packet as pvefw-logger reads it; None for a prefix not pve-firewall's."""
    prefix = attrs.get(NFULA_PREFIX, b"").rstrip(b"\0").decode(errors="replace")
    parts = prefix.split(":", 4)  # "", vmid, loglevel, chain, " message"
    if len(parts) != 5 or parts[0] != "":
        return None
    at = time.time()
    if NFULA_TIMESTAMP in attrs:
        sec, usec = struct.unpack("!QQ", attrs[NFULA_TIMESTAMP][:16])
        at = sec + usec / 1e6
    payload = attrs.get(NFULA_PAYLOAD, b"")
    src = dst = "?"
    proto, dport, l4 = 0, None, b""
    if payload[:1] and payload[0] >> 4 == 4:
        ihl = (payload[0] & 0x0F) * 4
        proto = payload[9]
        src, dst = (
            str(ipaddress.IPv4Address(payload[12:16])),
            str(ipaddress.IPv4Address(payload[16:20])),
        )
        l4 = payload[ihl:]
    elif payload[:1] and payload[0] >> 4 == 6:
        proto = payload[6]
        src, dst = (
            str(ipaddress.IPv6Address(payload[8:24])),
            str(ipaddress.IPv6Address(payload[24:40])),
        )
        l4 = payload[40:]
    if proto in (6, 17) and len(l4) >= 4:
        dport = struct.unpack("!H", l4[2:4])[0]
    return Denial(
        int(parts[1]),
        parts[3],
        at,
        parts[4].lstrip(),
        src,
        dst,
        PROTOS.get(proto, str(proto)),
        dport,
    )


class NflogReader:
    """Reads netlink log group ``group`` on a thread of its own until closed."""

    def __init__(self, group: int) -> None:
        self.group = group
        self.denials: list[Denial] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
        self._thread = threading.Thread(target=self._loop, name=f"nflog-{group}", daemon=True)

    def __enter__(self) -> NflogReader:
        self._sock.bind((0, 0))
        self._sock.settimeout(5)
        config = NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_CONFIG
        bind = _attr(NFULA_CFG_CMD, struct.pack("=B", NFULNL_CFG_CMD_BIND) + b"\0" * 3)
        mode = _attr(NFULA_CFG_MODE, struct.pack("!IBB", 0xFFFF, NFULNL_COPY_PACKET, 0))
        for seq, attrs in ((1, bind), (2, mode)):
            self._sock.send(_message(config, seq, socket.AF_UNSPEC, self.group, attrs))
            self._ack(seq)
        self._sock.settimeout(0.2)
        self._thread.start()
        return self

    def _ack(self, seq: int) -> None:
        data = self._sock.recv(65536)
        kind = struct.unpack_from("=H", data, 4)[0]
        if kind == NLMSG_ERROR:
            (error,) = struct.unpack_from("=i", data, 16)
            if error:
                raise OSError(-error, f"nflog group {self.group}: config {seq} refused")

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                data = self._sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                continue  # ENOBUFS: a burst overran the socket; the next packets still come
            while len(data) >= 16:
                length, kind = struct.unpack_from("=IH", data)
                if kind == (NFNL_SUBSYS_ULOG << 8 | NFULNL_MSG_PACKET):
                    denial = parse_packet(_attrs(data[20:length]))
                    if denial is not None:
                        with self._lock:
                            self.denials.append(denial)
                data = data[(length + 3) & ~3 :] if length else b""

    def of(self, vmid: int) -> list[Denial]:
        with self._lock:
            return [d for d in self.denials if d.vmid == vmid]

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        with contextlib.suppress(OSError):
            self._sock.close()
