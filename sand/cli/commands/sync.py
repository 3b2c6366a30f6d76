"""``sand sync``: the console, the webhook listener and the metrics around
:class:`sand.loops.sync.Syncer` (which itself prints nothing)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path, PurePosixPath

from sand.cli.exits import EXIT_ERROR, EXIT_OK
from sand.cli.hooks import HookServer, parse_address
from sand.cli.inflight import track
from sand.cli.metrics import PrometheusMetrics
from sand.cli.progress import progress_view
from sand.cli.watch import ConsoleReport, now_stamp
from sand.errors import PlanRefused
from sand.logs import register_secret
from sand.loops.gitmirror import GitMirror
from sand.loops.notify import Announcer
from sand.loops.sync import START, NoMetrics, Syncer, SyncMetrics
from sand.loops.unattended import Reconciler
from sand.manifest.hostsecrets import load_host_secrets
from sand.manifest.pins import load_pins
from sand.state.private import private_file_problem
from sand.survey.agentread import AgentReader


def _refused(message: str) -> Exception:
    return PlanRefused(message)


def _check(args: argparse.Namespace) -> None:
    path = PurePosixPath(args.path)
    if path.is_absolute() or ".." in path.parts or not args.path.strip():
        raise _refused(f"--path {args.path!r}: give a path inside the repository")
    if args.listen and not args.webhook_secret_file:
        raise _refused("--listen needs --webhook-secret-file: an unsigned hook is refused")
    if args.webhook_secret_file and not args.listen:
        raise _refused("--webhook-secret-file is for --listen")
    if args.once and (args.listen or args.metrics):
        raise _refused("--once runs one check and exits: no --listen or --metrics")


def _address(flag: str, text: str) -> tuple[str, int]:

    try:
        return parse_address(text)
    except ValueError as exc:
        raise _refused(f"{flag}: {exc}") from None


def _secret(path: str) -> bytes:

    problem = private_file_problem(Path(path))
    if problem:
        raise _refused(f"the webhook secret file {path} {problem}")
    value = Path(path).read_text(encoding="utf-8").strip()
    if len(value) < 8:
        raise _refused(f"the webhook secret in {path} is shorter than 8 characters")
    register_secret(value)
    return value.encode()


def run(args: argparse.Namespace) -> int:

    _check(args)
    hooks_at = _address("--listen", args.listen) if args.listen else None
    metrics_at = _address("--metrics", args.metrics) if args.metrics else None
    secret = _secret(args.webhook_secret_file) if args.webhook_secret_file else b""
    token = Path(args.token_file).expanduser() if args.token_file else None
    mirror = GitMirror(args.repo, args.branch, token_file=token)
    metrics: SyncMetrics = NoMetrics()
    prometheus = None
    if metrics_at is not None:
        metrics = prometheus = PrometheusMetrics()
    host_dir = Path(args.host_dir or ".").expanduser().resolve()
    # A broken map or pin is said now, at its line, not at a run.
    load_host_secrets(host_dir)
    load_pins(host_dir)
    # Each run's progress as plain lines, as a watch's: runs interleave with notes.
    with progress_view("log" if args.log_format == "json" else "lines") as view:
        inflight = track(view)
        announce = Announcer(say=ConsoleReport("sync").note)
        reconciler = Reconciler(
            parallelism=args.parallelism,
            allow_mass_delete=args.allow_mass_delete,
            command="sync",
            report=ConsoleReport("sync"),
            hooks=inflight,
            lease_wait=args.lease_wait,
            # The agents' state is exported with the metrics, and told as notify: asks.
            agents=AgentReader(),
            always_read=prometheus is not None,
            announce=announce,
        )
        syncer = Syncer(mirror, args.path, host_dir, reconciler, metrics)
        try:
            if args.once:
                result = asyncio.run(syncer.check(START))
                failed = syncer.head_rejected or result is None or not result.ok
                return EXIT_ERROR if failed else EXIT_OK
            where = f"{args.repo} ({args.branch or 'default branch'}, {args.path})"
            serving = _Serving(syncer, args, hooks_at, metrics_at, secret, prometheus)
            try:
                asyncio.run(serving.run(where))
            except KeyboardInterrupt:
                if inflight.phases:
                    raise  # during a run: sand.cli.main names what it left, exits 130
                print(f"{now_stamp()} sync: stopped", file=sys.stderr)
        finally:
            announce.close()  # what is queued for the webhook gets a moment to go
    return EXIT_OK


class _Serving:
    """The long-running sync: its listener and metrics server around the loop."""

    def __init__(
        self,
        syncer: Syncer,
        args: argparse.Namespace,
        hooks_at: tuple[str, int] | None,
        metrics_at: tuple[str, int] | None,
        secret: bytes,
        prometheus: PrometheusMetrics | None,
    ) -> None:
        self.syncer = syncer
        self.args = args
        self.hooks_at = hooks_at
        self.metrics_at = metrics_at
        self.secret = secret
        self.prometheus = prometheus

    async def run(self, where: str) -> None:

        args = self.args
        loop = asyncio.get_running_loop()
        stop, poke, item_poke = asyncio.Event(), asyncio.Event(), asyncio.Event()
        with contextlib.suppress(NotImplementedError):
            # systemd's stop: the same as Ctrl-C between runs, a clean end.
            loop.add_signal_handler(signal.SIGTERM, stop.set)
        hooks = self._listen(loop, poke, item_poke) if self.hooks_at is not None else None
        try:
            if self.prometheus is not None and self.metrics_at is not None:
                try:
                    self.prometheus.serve(*self.metrics_at)
                except OSError as exc:
                    raise _refused(f"--metrics {args.metrics}: {exc.strerror}") from None
                print(
                    f"{now_stamp()} sync: metrics on http://{args.metrics}/metrics", file=sys.stderr
                )
            print(
                f"{now_stamp()} sync: following {where} every {args.interval:g}s (Ctrl-C to stop)",
                file=sys.stderr,
                flush=True,
            )
            await self.syncer.run(args.interval, stop, poke, item_poke)
        finally:
            if hooks is not None:
                hooks.stop()
            if self.prometheus is not None:
                self.prometheus.stop()

    def _listen(
        self, loop: asyncio.AbstractEventLoop, poke: asyncio.Event, item_poke: asyncio.Event
    ) -> HookServer:

        report, metrics = self.syncer.reconciler.report, self.syncer.metrics
        assert self.hooks_at is not None

        def refused(address: str) -> None:
            report.note(f"webhook from {address} refused: bad or missing signature")
            metrics.failed("webhook")

        # Called on the listener's threads: each hands over to the loop.
        def on_poke() -> None:
            loop.call_soon_threadsafe(poke.set)

        def on_item() -> None:
            loop.call_soon_threadsafe(item_poke.set)

        def on_refused(address: str) -> None:
            loop.call_soon_threadsafe(refused, address)

        try:
            server = HookServer(self.hooks_at, self.secret, on_poke, on_refused, on_item).start()
        except OSError as exc:
            raise _refused(f"--listen {self.args.listen}: {exc.strerror}") from None
        print(
            f"{now_stamp()} sync: webhook on http://{self.args.listen}/hooks/git", file=sys.stderr
        )
        return server
