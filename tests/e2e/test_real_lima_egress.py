"""Egress on the real Lima (tests/rig/lima.py): one Debian 12 guest booted under TCG with
a deny policy, its QEMU started by Lima through sand's shim, probed from inside as root.

One VM for the module (a boot takes minutes under TCG): ``sand apply`` makes it, a
plan after says nothing changed (the running QEMU's command line is recognised), and
one probe script in the guest tries every way out at once; each test reads its own
result. The allowed way is an HTTPS git clone, through the proxy, from the rig's git
server at one of this host's non-loopback addresses (the policy's one CIDR). Each way
out has a listener on the host where one would arrive, so "blocked" means nothing came,
not only that the guest saw an error; and each denial the proxy saw is in the host's
denial log. The closed guest is provisioned as any VM is: its repository is cloned through
the broker's relay (the token stays on the host), a brokered push lands on an allowed
branch only, and a declared port still reaches it from the host's loopback.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from sand.egress.shim import PROXY_ADDRESS, PROXY_PORT
from tests.e2e.test_real_lima import (
    BROKERED,
    GUEST_PORT,
    TEMPLATE,
    Tier,
    _brokered_push,
    _guest_listener_reached_on_loopback_only,
    _host_addresses,
    new_tier,
)
from tests.rig import limapy
from tests.rig.gitserver import GitServer
from tests.rig.lima import LimaRig
from tests.rig.tlscert import self_signed

pytestmark = [pytest.mark.e2e, pytest.mark.real_lima, pytest.mark.timeout(2400)]

# The brokered secret and its repo are test_real_lima's (BROKERED).
MANIFEST = (
    """\
apiVersion: sand/v1
project: reallimaegress
backends:
  laptop: {{type: lima, lima_home: ./lima}}
defaults: {{image: "template:{template}", cpus: 1, memory: 2GiB, disk: 8GiB}}
secrets:
"""
    + BROKERED
    + """\
vms:
  - name: dev-1
    egress: {{domains: [allowed.invalid], cidrs: ["{ip}/32"], ports: [{port}]}}
    ports: [{{guest: {guest}, host: {host}}}]
    repos: [project]
"""
)

# Run as root in the guest: every way out, each reported as "connected"/"answered" or
# "blocked: why". Python, because it is in every guest image (curl, dig, ping are not).
PROBE = r"""
import json, socket, struct, subprocess, sys
cfg = json.loads(sys.argv[1])
ip = cfg["ip"]
# A restricted guest comes up without a default route (its sockets say "Network is
# unreachable"); root puts one back first (the guest changing its routes), so that
# what blocks each probe is the host, not the guest's own routing.
before = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
route = subprocess.run(["ip", "route", "replace", "default", "via", "192.168.5.2"],
                       capture_output=True, text=True)
routes = subprocess.run(["ip", "route", "show", "default"], capture_output=True, text=True)

def tcp(host, port, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(8)
    try:
        s.connect((host, port))
        s.sendall(b"probe")
        return "connected"
    except OSError as e:
        return "blocked: %s" % e
    finally:
        s.close()

def udp(host, port, payload):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(5)
    try:
        s.sendto(payload, (host, port))
        s.recv(512)
        return "answered"
    except OSError as e:
        return "blocked: %s" % e
    finally:
        s.close()

def icmp(host):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(5)
    body = struct.pack("!BBHHH", 8, 0, 0, 0x5a5a, 1) + b"sandprob"
    total = sum(struct.unpack("!%dH" % (len(body) // 2), body))
    total = (total >> 16) + (total & 0xFFFF)
    csum = ~(total + (total >> 16)) & 0xFFFF
    body = body[:2] + struct.pack("!H", csum) + body[4:]
    try:
        s.sendto(body, (host, 0))
        while True:
            data = s.recv(1024)
            if data[20] == 0:
                return "answered"
    except OSError as e:
        return "blocked: %s" % e

def proxy(target):
    try:
        s = socket.create_connection((cfg["proxy"], cfg["proxy_port"]), timeout=20)
        s.sendall(("CONNECT %s HTTP/1.1\r\n\r\n" % target).encode())
        return s.recv(200).decode(errors="replace").split("\r\n")[0]
    except OSError as e:
        return "unreachable: %s" % e

query = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03org\x00\x00\x01\x00\x01"
out = {
    "routes_at_boot": before.strip(),
    "route": "%d %s" % (route.returncode, routes.stdout.strip()),
    "direct_allowed": tcp(ip, cfg["git_port"]),
    "direct_other": tcp(ip, cfg["other_port"]),
    "dns_udp": udp(ip, 53, query),
    "dns_udp_slirp": udp("192.168.5.3", 53, query),
    "dns_tcp": tcp(ip, 53),
    "udp_random": udp(ip, cfg["udp_port"], b"probe"),
    "icmp": icmp(ip),
    "host_loopback": tcp("192.168.5.2", cfg["loopback_port"]),
    "metadata": tcp("169.254.169.254", 80),
    "ipv6": tcp("fec0::2", cfg["loopback_port"], socket.AF_INET6),
    "proxy_name": proxy("exfil.example.com:%d" % cfg["git_port"]),
    "proxy_port": proxy("%s:%d" % (ip, cfg["other_port"])),
    "proxy_ip": proxy("192.168.5.2:%d" % cfg["loopback_port"]),
    "proxy_metadata": proxy("169.254.169.254:%d" % cfg["git_port"]),
}
print(json.dumps(out))
"""


@dataclass
class Catcher:
    """A host-side listener where a way out would arrive: what came, if anything."""

    kind: int
    address: str
    port: int = 0
    came: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        family = socket.AF_INET6 if ":" in self.address else socket.AF_INET
        self.sock = socket.socket(family, self.kind)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((self.address, self.port))
        self.port = self.sock.getsockname()[1]
        if self.kind == socket.SOCK_STREAM:
            self.sock.listen()
        # Waits in short turns, and close() ends the thread before the socket: a wait
        # left on a closed socket takes a later test's connections (tests.rig.acceptloop).
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._catch, daemon=True)
        self._thread.start()

    def _catch(self) -> None:
        while not self._stop.is_set():
            try:
                if self.kind == socket.SOCK_STREAM:
                    conn, peer = self.sock.accept()
                    conn.close()
                else:
                    _, peer = self.sock.recvfrom(512)
            except TimeoutError:
                continue
            except OSError:
                return
            self.came.append(str(peer))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


@dataclass
class Closed:
    tier: Tier
    ip: str
    server: GitServer
    catchers: dict[str, Catcher]
    results: dict[str, str]
    denials: list[dict[str, object]]
    clone: str
    port: int  # the git server's, the one port the policy allows


def _catchers(ip: str) -> dict[str, Catcher]:
    made = {
        "other": Catcher(socket.SOCK_STREAM, ip),
        "udp": Catcher(socket.SOCK_DGRAM, ip),
        "loopback": Catcher(socket.SOCK_STREAM, "127.0.0.1"),
    }
    # Another resolver at this host's address, port 53 (free unless a resolver runs here).
    for key, kind in (("dns_udp", socket.SOCK_DGRAM), ("dns_tcp", socket.SOCK_STREAM)):
        with contextlib.suppress(OSError):
            made[key] = Catcher(kind, ip, 53)
    with contextlib.suppress(OSError):
        made["loopback6"] = Catcher(socket.SOCK_STREAM, "::1", made["loopback"].port)
    return made


@pytest.fixture(scope="module")
def closed(lima_reaped: LimaRig) -> Iterator[Closed]:
    tier = new_tier(lima_reaped)
    ip = _host_addresses()[0]
    cert, key = self_signed(tier.root, ip)
    for path in (cert, key):
        shutil.chown(path, tier.lima.uid, tier.lima.gid)
    server = GitServer(f"egress-{secrets.token_hex(12)}", host=ip, tls=(cert, key)).start()
    catchers = _catchers(ip)
    try:
        server.create_repo("project", {"README.md": "through the proxy\n"})
        port = int(server.url_for("project").rsplit(":", 1)[1].split("/")[0])
        manifest = MANIFEST.format(
            template=TEMPLATE, ip=ip, port=port, repo=server.url_for("project"),
            guest=GUEST_PORT, host=tier.host_port,
        )  # fmt: skip
        tier.write("sand.yaml", manifest)
        tier.env |= {"SAND_TEST_GH": server.token, "SSL_CERT_FILE": str(cert)}
        # Provisioned in the closed guest: its repo cloned through the broker's relay.
        tier.ok("apply", "--auto-approve", timeout=1500, step="apply-create")
        tier.ok("plan", "--detailed-exitcode", step="plan-after")
        url = server.url_for("project").replace("https://", f"https://x:{server.token}@")
        clone = tier.run(
            limapy.SYSTEM_PYTHON,
            "-m",
            "sand",
            "shell",
            "dev-1",
            "--",
            "git",
            "-c",
            f"http.proxy=http://{PROXY_ADDRESS}:{PROXY_PORT}",
            "-c",
            "http.sslVerify=false",
            "clone",
            "-q",
            url,
            "/tmp/project",
            timeout=300,
        )
        clone_out = clone.stdout + clone.stderr
        if clone.returncode == 0:
            readme = ("shell", "dev-1", "--", "cat", "/tmp/project/README.md")
            clone_out = tier.ok(*readme)
        cfg = {
            "ip": ip,
            "git_port": port,
            "other_port": catchers["other"].port,
            "udp_port": catchers["udp"].port,
            "loopback_port": catchers["loopback"].port,
            "proxy": PROXY_ADDRESS,
            "proxy_port": PROXY_PORT,
        }
        probe = ("shell", "dev-1", "--", "sudo", "python3", "-c", PROBE, json.dumps(cfg))
        results = json.loads(tier.ok(*probe, timeout=600, step="probe").strip().splitlines()[-1])
        print(f"real_lima egress: clone {clone_out!r}, probes {results}")
        logs = list((tier.root / "state").glob("projects/*/egress/*.denied.jsonl"))
        denials = [json.loads(x) for p in logs for x in p.read_text().splitlines()]
        yield Closed(tier, ip, server, catchers, results, denials, clone_out, port)
    finally:
        print(f"real_lima egress timings (s): {tier.timings}")
        for catcher in catchers.values():
            catcher.close()
        server.stop()
        tier.cleanup()


def test_the_running_qemu_is_restricted_and_forwards_the_proxy(closed: Closed) -> None:
    pid = int((closed.tier.root / "lima" / "dev-1" / "qemu.pid").read_text())
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    netdev = argv[argv.index("-netdev") + 1]
    assert "restrict=on" in netdev.split(","), netdev
    assert f"guestfwd=tcp:{PROXY_ADDRESS}:{PROXY_PORT}-cmd:" in netdev, netdev


def test_an_allowed_https_clone_through_the_proxy_works(closed: Closed) -> None:
    assert closed.clone == "through the proxy\n", closed.clone


def test_the_guest_routes_everything_to_the_gateway_before_it_tries(closed: Closed) -> None:
    assert closed.results["route"].startswith("0 default via 192.168.5.2"), closed.results


# Each way out straight from the guest, and the host-side listeners it would reach.
BLOCKED = {
    "direct_allowed": (),  # the allowed server itself, not through the proxy
    "direct_other": ("other",),  # a disallowed address and port
    "dns_udp": ("dns_udp",),  # another resolver, UDP 53
    "dns_tcp": ("dns_tcp",),  # another resolver, TCP 53
    "dns_udp_slirp": (),  # slirp's own resolver (Lima's host resolver behind it)
    "udp_random": ("udp",),
    "icmp": (),
    "host_loopback": ("loopback",),  # 192.168.5.2: the host's loopback services
    "metadata": (),  # 169.254.169.254
    "ipv6": ("loopback6",),  # slirp's IPv6 host address
}


@pytest.mark.parametrize("probe", list(BLOCKED))
def test_a_way_out_of_the_guest_is_blocked(closed: Closed, probe: str) -> None:
    assert closed.results[probe].startswith("blocked"), closed.results
    for name in BLOCKED[probe]:
        if name in closed.catchers:
            assert closed.catchers[name].came == [], (name, closed.catchers[name].came)


# What the guest asks the proxy for, and the destination its denial is logged under.
DENIED: dict[str, Callable[[Closed], str]] = {
    "proxy_name": lambda c: f"exfil.example.com:{c.port}",
    "proxy_port": lambda c: f"{c.ip}:{c.catchers['other'].port}",
    "proxy_ip": lambda c: f"192.168.5.2:{c.catchers['loopback'].port}",
    "proxy_metadata": lambda c: f"169.254.169.254:{c.port}",
}


@pytest.mark.parametrize("probe", list(DENIED))
def test_the_proxy_refuses_and_logs_it_on_the_host(closed: Closed, probe: str) -> None:
    assert closed.results[probe].startswith("HTTP/1.1 403"), closed.results
    destination = DENIED[probe](closed)
    logged = [d for d in closed.denials if d["destination"] == destination]
    assert logged and logged[0]["vm"] == "dev-1" and logged[0]["time"], closed.denials
    assert closed.catchers["other"].came == [] and closed.catchers["loopback"].came == []


def test_provisioning_cloned_the_repo_through_the_broker_and_left_no_token(
    closed: Closed,
) -> None:
    """The closed guest was provisioned: its repo came through the broker's relay (the
    one address besides the proxy the guest reaches), and the token is nowhere in it."""
    readme = closed.tier.ok("shell", "dev-1", "--", "sh", "-c", "cat ~/src/project/README.md")
    assert readme == "through the proxy\n"
    token = closed.server.token
    # The fixture's own clone through the proxy put the token in its URL: not sand's.
    closed.tier.ok("shell", "dev-1", "--", "rm", "-rf", "/tmp/project")
    hits = closed.tier.run(
        limapy.SYSTEM_PYTHON, "-m", "sand", "shell", "dev-1", "--", "sudo", "grep", "-rlF",
        "--", token, "/home", "/etc", "/run", "/tmp", "/var/lib/sand",
    )  # fmt: skip
    assert hits.returncode == 1 and hits.stdout == "", hits.stdout + hits.stderr


def test_a_brokered_push_from_the_closed_guest_lands_on_an_allowed_branch_only(
    closed: Closed,
) -> None:
    _brokered_push(closed.tier, closed.server)


def test_a_declared_port_reaches_the_closed_guest_from_the_host_loopback(closed: Closed) -> None:
    """restrict=on closes the guest's way out, not the host's way in: Lima forwards the
    declared port from the host's loopback (and nowhere else) as for an open guest."""
    _guest_listener_reached_on_loopback_only(closed.tier)


def test_a_start_by_hand_boots_it_open_and_apply_closes_it_again(closed: Closed) -> None:
    """Last in the module: it restarts the VM (two more boots)."""
    tier = closed.tier
    tier.limactl("stop", "dev-1", timeout=600, step="limactl-stop")
    tier.limactl("start", "dev-1", timeout=900, step="limactl-start")
    drift = tier.run(limapy.SYSTEM_PYTHON, "-m", "sand", "plan", "--detailed-exitcode")
    assert drift.returncode == 2, drift.stdout + drift.stderr
    assert '~ egress = "allow" -> "deny except 1 domain, 1 cidr on port' in drift.stdout
    tier.ok("apply", "--auto-approve", timeout=1500, step="apply-restore")
    test_the_running_qemu_is_restricted_and_forwards_the_proxy(closed)
    tier.ok("plan", "--detailed-exitcode")
