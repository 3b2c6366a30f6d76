"""What the credential broker adds to a git operation: brokered vs direct, on the rig.

    python bench/broker_cost.py [--runs 15]

The rig's token-protected git server over HTTPS on this host's loopback, a small
repository, and this host's git in two homes: one reaching the server directly with
the token (a credential helper, as a tmpfs-delivered secret works), one reaching it
through a broker (the same server code ``python -m sand.broker`` runs) with a VM's
broker credential. Each runs ``git ls-remote`` (one discovery) and ``git fetch`` of a
new commit (discovery and a pack); the figure is the median of each. Goal: a brokered
operation costs at most 50 ms more than the direct one.

On the rig the brokered one is often the faster: the direct git opens a TLS connection
(git's libcurl, GnuTLS on Debian, its trust store loaded per process) for each of its
two or three requests, where the brokered git speaks plain HTTP to the broker and the
broker's TLS (Python's OpenSSL, the context loaded once) is cheaper. Against a distant
server the broker's hop is what it adds: one loopback (Lima) or bridge (Proxmox) round
trip per request, and for a push one discovery more (the default branch, asked of the
server).

The same for a GitHub API call (``api: [read]``): a real ``curl`` GET of an issues
listing from a recording HTTPS server standing for the API, directly with the token
or through the broker with the VM's credential; the broker's decision (the request
mapped to one operation and one repository) and its record of it are in the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import summary  # noqa: E402
from sand.desired.brokered import BrokerGrant  # noqa: E402
from tests.rig.brokerrig import start_broker  # noqa: E402
from tests.rig.gitserver import GitServer  # noqa: E402
from tests.rig.httpsupstream import HttpsUpstream  # noqa: E402
from tests.rig.tlscert import self_signed  # noqa: E402

CREDENTIAL = "bench-vm-credential-0b5e"
TOKEN = "bench-token-7c1d9e"


def _home(path: Path, secret: str, config: str, cert: str) -> Path:
    path.mkdir()
    (path / "secret").write_text(secret + "\n")
    helper = f"!f() {{ echo username=x; printf 'password=%s\\n' \"$(cat {path}/secret)\"; }}; f"
    (path / ".gitconfig").write_text(
        f"{config}[credential]\n\thelper = {json.dumps(helper)}\n[http]\n\tsslCAInfo = {cert}\n"
        "[user]\n\tname = bench\n\temail = bench@sand.invalid\n"
    )
    return path


def _git(home: Path, *args: str, cwd: Path | None = None) -> float:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    started = time.perf_counter()
    subprocess.run(["git", *args], cwd=cwd or home, env=env, check=True, capture_output=True)
    return (time.perf_counter() - started) * 1000


def measure(runs: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="sand-bench-broker-") as tmp:
        work = Path(tmp)
        cert, key = self_signed(work, "127.0.0.1")
        server = GitServer(TOKEN, host="127.0.0.1", tls=(cert, key)).start()
        url = server.create_repo("project")
        grant = BrokerGrant("GH_TOKEN", (url,), ("agent/*",))
        broker = start_broker(work / "broker", "bench", CREDENTIAL, grant, TOKEN, cert)
        via = f"http://127.0.0.1:{broker.server_address[1]}"
        rewrite = f'[url "{via}/{server.base_url.removeprefix("https://")}/"]\n'
        rewrite += f"\tinsteadOf = {server.base_url}/\n"
        homes = {
            "direct": _home(work / "direct", TOKEN, "", cert),
            "brokered": _home(work / "brokered", CREDENTIAL, rewrite, cert),
        }
        seed = _home(work / "seed", TOKEN, "", cert)
        _git(seed, "clone", "-q", url, "w")
        try:
            for home in homes.values():
                _git(home, "clone", "-q", url, "w")
            times: dict[str, dict[str, list[float]]] = {h: {"ls": [], "fetch": []} for h in homes}
            for i in range(runs):
                (seed / "w" / "n.txt").write_text(f"{i}\n")
                _git(seed, "add", "n.txt", cwd=seed / "w")
                _git(seed, "commit", "-qm", f"n{i}", cwd=seed / "w")
                _git(seed, "push", "-q", "origin", "HEAD", cwd=seed / "w")
                for how, home in homes.items():  # interleaved: the same load for both
                    times[how]["ls"].append(_git(home, "ls-remote", "-q", url))
                    times[how]["fetch"].append(_git(home, "fetch", "-q", cwd=home / "w"))
        finally:
            broker.shutdown()
            broker.server_close()
            server.stop()
        for how, figures in times.items():
            out[how] = {op: statistics.median(values) for op, values in figures.items()}
    return out


def _curl(url: str, authorization: str, cert: str) -> float:
    started = time.perf_counter()
    subprocess.run(
        ["curl", "-sSf", "--cacert", cert, "-o", "/dev/null", "-H", "@-", url],
        input=f"Authorization: {authorization}\n".encode(),  # never in an argv
        check=True,
        capture_output=True,
    )
    return (time.perf_counter() - started) * 1000


def measure_api(runs: int) -> dict[str, float]:
    """Median ms of a curl GET of a repository's issues: direct, and through the broker."""
    with tempfile.TemporaryDirectory(prefix="sand-bench-broker-api-") as tmp:
        work = Path(tmp)
        cert, key = self_signed(work, "127.0.0.1")
        api = HttpsUpstream("127.0.0.1", cert, key)
        grant = BrokerGrant("GH_TOKEN", (f"https://{api.host}/acme/webapp.git",), (), ("read",))
        broker = start_broker(work / "broker", "bench", CREDENTIAL, grant, TOKEN, cert)
        path = f"{api.host}/api/v3/repos/acme/webapp/issues"
        via = f"http://127.0.0.1:{broker.server_address[1]}/{path}"
        times: dict[str, list[float]] = {"direct": [], "brokered": []}
        try:
            for _ in range(runs):  # interleaved: the same load for both
                times["direct"].append(_curl(f"https://{path}", f"Bearer {TOKEN}", cert))
                times["brokered"].append(_curl(via, f"Bearer {CREDENTIAL}", cert))
        finally:
            broker.shutdown()
            broker.server_close()
            api.stop()
    return {how: statistics.median(values) for how, values in times.items()}


def rows(runs: int = 15) -> list[tuple[str, str]]:
    medians = measure(runs)
    for how, median in measure_api(runs).items():
        medians[how]["api"] = median
    direct, brokered = medians["direct"], medians["brokered"]
    result = []
    for op, words in (
        ("ls", "git ls-remote"),
        ("fetch", "git fetch of a new commit"),
        ("api", "GitHub API GET (curl)"),
    ):
        more = brokered[op] - direct[op]
        result.append(
            (
                f"{words} (median of {runs})",
                f"direct {direct[op]:.0f} ms, brokered {brokered[op]:.0f} ms: "
                f"{more:+.0f} ms; goal ≤ +50 ms",
            )
        )
        summary.record(
            f"brokered {words}",
            brokered[op],
            "ms",
            baseline=("direct", direct[op]),
            goal="≤ direct + 50 ms",
        )
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15, help="operations of each kind")
    print("\n".join(f"{k}: {v}" for k, v in rows(parser.parse_args().runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
