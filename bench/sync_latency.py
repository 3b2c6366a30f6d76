"""``sand sync``: time from a pushed commit to the start of its apply, with a webhook
and with polling.

    python bench/sync_latency.py [--commits 5] [--interval 5]

A real git smart-HTTP server (``git http-backend``, token-protected, on 127.0.0.1) holds
the manifest; ``sand sync`` runs as a process against fakepve. Each commit changes one
VM's CPU count; the clock starts when ``git push`` returns and stops when the sync says
"applying revision <it>". Webhook: a signed ``POST /hooks/git`` is sent right after the
push (``--interval`` 3600, so only the hook can wake it). Polling: no hook, ``--interval``
seconds between fetches, so the expected latency is about half of it.

Beside the webhook's latency, the CPU time the ``sand sync`` process and the git it ran
used meanwhile (from ``/proc``: the steadier figure on a shared machine); with
``bench/run.py --before REF`` the webhook case is measured again on the tree before,
on the same rig in the same run. The rig's server keeps a connection open across
requests (HTTP/1.1), as a forge does, so a fetch's requests share one TLS handshake.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import os
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.core import before_tree, installed_env  # noqa: E402
from bench.summary import record  # noqa: E402
from tests.cli.sync_rig import Repo, SyncProcess, free_port, private_file  # noqa: E402
from tests.cli.test_sync import vm_manifest  # noqa: E402
from tests.fakepve_rig.rig import FakePveRig  # noqa: E402
from tests.rig.gitserver import GitServer  # noqa: E402

SECRET = "bench-hook-secret"


def _poke(port: int) -> None:
    body = b'{"ref": "refs/heads/main"}'
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/git",
        data=body,
        headers={"X-Hub-Signature-256": signature},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 202


def _cpu_s(pid: int) -> float:
    """The CPU seconds (user + system) process ``pid`` and its waited-for children used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def measure(
    commits: int, *, webhook: bool, interval: float, tree: Path | str = ROOT
) -> list[tuple[float, float]]:
    """Per commit: the seconds from its push to its apply's start, and the CPU seconds
    ``tree``'s ``sand sync`` (and the git it ran) used meanwhile."""
    from fakepve.certs import make_cert

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        pki = make_cert(tmp, hosts=("127.0.0.1",))[:2]
        # sand sends a token over HTTPS only; the git of the sync process trusts the cert.
        os.environ["GIT_SSL_CAINFO"] = pki[0]
        with GitServer("bench-token", host="127.0.0.1", tls=pki) as git:
            return _measure(work, pki, git, commits, webhook=webhook, interval=interval, tree=tree)


def _applying(sync: SyncProcess, sha: str) -> bool:
    return sha[:12] in sync.applying()


def _applied(sync: SyncProcess, sha: str) -> bool:
    return f"revision {sha[:12]} applied" in sync.text()


def _measure(
    work: Path,
    pki: tuple[str, str],
    git: GitServer,
    commits: int,
    *,
    webhook: bool,
    interval: float,
    tree: Path | str,
) -> list[tuple[float, float]]:
    rig = FakePveRig(pki, work / "pve")
    repo = Repo(git, "fleet", vm_manifest(rig, [{"name": "l-1"}]))
    token = private_file(work / "git.token", "bench-token")
    args = ["--repo", repo.url, "--token-file", str(token), "--host-dir", str(rig.workdir)]
    port = free_port()
    if webhook:
        secret = private_file(work / "hook.secret", SECRET)
        args += ["--interval", "3600", "--listen", f"127.0.0.1:{port}"]
        args += ["--webhook-secret-file", str(secret)]
    else:
        args += ["--interval", str(interval)]
    (work / "sync").mkdir()
    sync = SyncProcess(work / "sync", *args, env=installed_env(tree))
    latencies = []
    try:
        sync.wait_for(lambda: sync.said("applied (converged)"))
        for n in range(1, commits + 1):
            # Polling: pushed at a random point between two fetches, as people push.
            time.sleep(0.3 if webhook else random.uniform(0.3, interval + 0.3))
            sha = repo.push(vm_manifest(rig, [{"name": "l-1", "cpus": 1 + n % 2}]), f"c{n}")
            used = _cpu_s(sync.proc.pid)
            pushed = time.monotonic()
            if webhook:
                _poke(port)
            sync.wait_for(partial(_applying, sync, sha), timeout=interval * 3 + 30, poll=0.002)
            latencies.append((time.monotonic() - pushed, _cpu_s(sync.proc.pid) - used))
            sync.wait_for(partial(_applied, sync, sha))
    finally:
        sync.stop()
        rig.stop()
    return latencies


def rows(commits: int = 5, interval: float = 5.0) -> list[tuple[str, str]]:
    hooked = measure(commits, webhook=True, interval=interval)
    hook = [wall for wall, _ in hooked]
    cpu = statistics.median(c for _, c in hooked) * 1000
    poll = [wall for wall, _ in measure(commits, webhook=False, interval=interval)]
    before = before_tree()
    then = measure(commits, webhook=True, interval=interval, tree=before) if before else []
    then_ms = statistics.median(w for w, _ in then) * 1000 if then else None
    then_cpu = statistics.median(c for _, c in then) * 1000 if then else None
    record(
        "sand sync: push → apply starts, webhook (median)",
        statistics.median(hook) * 1000,
        "ms",
        before=then_ms,
        goal="≤ 300 ms on a quiet machine",
    )
    record("  sand sync's CPU (and its git's) meanwhile", cpu, "ms", before=then_cpu)
    return [
        (
            "push → apply starts, webhook (median)",
            f"{statistics.median(hook) * 1000:.0f} ms (worst {max(hook) * 1000:.0f} ms, "
            f"{commits} commits); CPU of sand sync and its git {cpu:.0f} ms"
            + (f"; the tree before: {then_ms:.0f} ms, CPU {then_cpu:.0f} ms" if then else ""),
        ),
        (
            f"push → apply starts, polling every {interval:g}s (median)",
            f"{statistics.median(poll) * 1000:.0f} ms (worst {max(poll) * 1000:.0f} ms; "
            f"expected ≈ {interval / 2:g} s)",
        ),
        ("webhook vs polling", f"{statistics.median(poll) / statistics.median(hook):.1f}× sooner"),
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--commits", type=int, default=5)
    parser.add_argument("--interval", type=float, default=5.0)
    args = parser.parse_args()
    for key, value in rows(args.commits, args.interval):
        print(f"{key:44} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
