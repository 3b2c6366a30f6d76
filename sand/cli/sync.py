"""``sand sync``: the console, the webhook listener and the metrics around
:class:`sand.loops.sync.Syncer` (which itself prints nothing)."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from sand import defaults
from sand.cli.completion import complete_files
from sand.cli.exits import EXIT_ERROR, EXIT_OK
from sand.cli.flags import INTERVAL, LEASE_WAIT, add_apply_flags

if TYPE_CHECKING:
    import asyncio

    from sand.cli.hooks import HookServer
    from sand.cli.metrics import PrometheusMetrics
    from sand.loops.sync import Syncer


def add_sync_parser(sub: Any) -> None:
    p = sub.add_parser(
        "sync",
        help="apply the manifest in a git repository, each new commit once (GitOps)",
        description="Follow a branch of a git repository: fetch it every --interval "
        "seconds (or when a push webhook pokes --listen), apply each new commit's "
        "manifest once, keep the last good one in force when a commit's is invalid, and "
        "correct drift between commits only with selfHeal: true. The files the manifest "
        "names by a relative path come from --host-dir, never the repository; the manifest "
        "only names secrets, and --host-dir/secrets.yaml maps them to sources.",
    )
    p.add_argument("--repo", required=True, metavar="URL", help="https, ssh or file URL")
    p.add_argument("--branch", metavar="B", help="default: the repository's default branch")
    p.add_argument(
        "--path",
        default="sand.yaml",
        metavar="PATH",
        help="the manifest's path in the repository (default: sand.yaml)",
    )
    token = p.add_argument(
        "--token-file",
        metavar="F",
        help="a 0600 file holding an HTTPS token for the repository (never on argv)",
    )
    host_dir = p.add_argument(
        "--host-dir",
        metavar="DIR",
        help="where relative paths in the manifest (token_file, identity) are found, and "
        "secrets.yaml, the map of secret names to sources (default: the current directory)",
    )
    p.add_argument(
        "--interval",
        type=INTERVAL,
        default=defaults.INTERVAL,
        metavar="S",
        help=f"fetch every S seconds, 0.5 to 86400 (default {defaults.INTERVAL:g})",
    )
    p.add_argument("--once", action="store_true", help="fetch and apply once, then exit (CI)")
    p.add_argument("--listen", metavar="ADDR", help="serve POST /hooks/git on HOST:PORT")
    secret = p.add_argument(
        "--webhook-secret-file", metavar="F", help="the 0600 file holding the webhook secret"
    )
    complete_files(token, host_dir, secret)
    p.add_argument("--metrics", metavar="ADDR", help="serve Prometheus /metrics on HOST:PORT")
    add_apply_flags(p)
    p.add_argument(
        "--lease-wait",
        type=LEASE_WAIT,
        default=defaults.UNATTENDED_LEASE_WAIT,
        metavar="S",
        help="seconds a run waits while another applier holds the project's lease "
        f"(default {defaults.UNATTENDED_LEASE_WAIT:g})",
    )
    p.set_defaults(handler=cmd_sync)


def _refused(message: str) -> Exception:
    # here, not at the top: every command's parser imports this module, --version too
    from sand.errors import PlanRefused

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
    # here, not at the top: sand --help starts without it
    from sand.cli.hooks import parse_address

    try:
        return parse_address(text)
    except ValueError as exc:
        raise _refused(f"{flag}: {exc}") from None


def _secret(path: str) -> bytes:
    # here, not at the top: sand --help starts without it
    from sand.logs import register_secret

    # here, not at the top: sand --help starts without it
    from sand.state.private import private_file_problem

    problem = private_file_problem(Path(path))
    if problem:
        raise _refused(f"the webhook secret file {path} {problem}")
    value = Path(path).read_text(encoding="utf-8").strip()
    if len(value) < 8:
        raise _refused(f"the webhook secret in {path} is shorter than 8 characters")
    register_secret(value)
    return value.encode()


def cmd_sync(args: argparse.Namespace) -> int:
    # here, not at the top: sand --help starts without it
    import asyncio

    # here, not at the top: sand --help starts without it
    from sand.cli.inflight import track

    # here, not at the top: sand --help starts without it
    from sand.cli.progress import progress_view

    # here, not at the top: importing it loads pydantic and yaml
    from sand.cli.watch import ConsoleReport, _now

    # here, not at the top: importing it loads pydantic and yaml
    from sand.loops.gitmirror import GitMirror

    # here, not at the top: importing it loads pydantic and yaml
    from sand.loops.notify import Announcer

    # here, not at the top: importing it loads pydantic and yaml
    from sand.loops.sync import START, NoMetrics, Syncer, SyncMetrics

    # here, not at the top: importing it loads pydantic and yaml
    from sand.loops.unattended import Reconciler

    # here, not at the top: importing it loads pydantic and yaml
    from sand.manifest.hostsecrets import load_host_secrets

    # here, not at the top: importing it loads the backends
    from sand.survey.agentread import AgentReader

    _check(args)
    hooks_at = _address("--listen", args.listen) if args.listen else None
    metrics_at = _address("--metrics", args.metrics) if args.metrics else None
    secret = _secret(args.webhook_secret_file) if args.webhook_secret_file else b""
    token = Path(args.token_file).expanduser() if args.token_file else None
    mirror = GitMirror(args.repo, args.branch, token_file=token)
    metrics: SyncMetrics = NoMetrics()
    prometheus = None
    if metrics_at is not None:
        # here, not at the top: importing it loads pydantic and yaml
        from sand.cli.metrics import PrometheusMetrics

        metrics = prometheus = PrometheusMetrics()
    host_dir = Path(args.host_dir or ".").expanduser().resolve()
    load_host_secrets(host_dir)  # a broken map is said now, at its line, not at a run
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
                print(f"{_now()} sync: stopped", file=sys.stderr)
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
        # here, not at the top: sand --help starts without it
        import asyncio

        # here, not at the top: sand --help starts without it
        import signal

        # here, not at the top: importing it loads pydantic and yaml
        from sand.cli.watch import _now

        args = self.args
        loop = asyncio.get_running_loop()
        stop, poke = asyncio.Event(), asyncio.Event()
        with contextlib.suppress(NotImplementedError):
            # systemd's stop: the same as Ctrl-C between runs, a clean end.
            loop.add_signal_handler(signal.SIGTERM, stop.set)
        hooks = self._listen(loop, poke) if self.hooks_at is not None else None
        try:
            if self.prometheus is not None and self.metrics_at is not None:
                try:
                    self.prometheus.serve(*self.metrics_at)
                except OSError as exc:
                    raise _refused(f"--metrics {args.metrics}: {exc.strerror}") from None
                print(f"{_now()} sync: metrics on http://{args.metrics}/metrics", file=sys.stderr)
            print(
                f"{_now()} sync: following {where} every {args.interval:g}s (Ctrl-C to stop)",
                file=sys.stderr,
                flush=True,
            )
            await self.syncer.run(args.interval, stop, poke)
        finally:
            if hooks is not None:
                hooks.stop()
            if self.prometheus is not None:
                self.prometheus.stop()

    def _listen(self, loop: asyncio.AbstractEventLoop, poke: asyncio.Event) -> HookServer:
        # here, not at the top: sand --help starts without it
        from sand.cli.hooks import HookServer

        # here, not at the top: importing it loads pydantic and yaml
        from sand.cli.watch import _now

        report, metrics = self.syncer.reconciler.report, self.syncer.metrics
        assert self.hooks_at is not None

        def refused(address: str) -> None:
            report.note(f"webhook from {address} refused: bad or missing signature")
            metrics.failed("webhook")

        # Called on the listener's threads: each hands over to the loop.
        def on_poke() -> None:
            loop.call_soon_threadsafe(poke.set)

        def on_refused(address: str) -> None:
            loop.call_soon_threadsafe(refused, address)

        try:
            server = HookServer(self.hooks_at, self.secret, on_poke, on_refused).start()
        except OSError as exc:
            raise _refused(f"--listen {self.args.listen}: {exc.strerror}") from None
        print(f"{_now()} sync: webhook on http://{self.args.listen}/hooks/git", file=sys.stderr)
        return server
