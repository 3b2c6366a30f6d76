"""The board's jobs, each on a thread of its own with its own event loop: a refresh, a
plan, an apply, a land sweep, the shell's endpoint. The UI thread only starts them and
draws what they send back (posted as messages, never a blocking call), so a refresh of
a thousand VMs or a backend that hangs leaves every key working.

A refresh is single-flight: asked for while one runs, it runs once more after it, however
often it was asked. One apply at a time. Threads are daemons: quitting never waits for
an observation; an apply is cancelled where it is (as Ctrl-C does to ``sand apply``,
its journal entries stay open for the next apply) and waited for, briefly, by
:func:`sand.cli.commands.ui.run_board`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from textual.app import SuspendNotSupported
from textual.geometry import Size
from textual.message import Message

from sand.apply.events import StepEvent
from sand.cli.guests import run_ssh
from sand.cli.inflight import track
from sand.cli.outcome import outcome_text
from sand.cli.ui.model import shown
from sand.cli.ui.screens import CompareScreen, ConfirmScreen, TextScreen
from sand.cli.waits import StepClock, watched
from sand.errors import SandError
from sand.plan.model import Plan
from sand.plan.render import render_text
from sand.state.journal import Journal, journal_path
from sand.state.provlog import load_provision_log
from sand.verbs.compare import render
from sand.verbs.shell import tmux_command

if TYPE_CHECKING:
    from sand.cli.ui.fleet import Fleet, Snapshot
    from sand.cli.ui.state import BoardState
    from sand.verbs.compare import ForkView


class Board(Protocol):
    """The board as its jobs see it (``sand.cli.ui.app.Board``)."""

    @property
    def fleet(self) -> Fleet: ...

    @property
    def state(self) -> BoardState: ...

    @property
    def size(self) -> Size: ...

    def say(self, text: str) -> None: ...

    def show_error(self, text: str) -> None: ...

    def show_landing(self, vm: str, text: str) -> None: ...

    def show_plan(self, plan: Plan, kind: str = "plan") -> None: ...

    def show_snapshot(self, snapshot: Snapshot) -> None: ...

    def show_step(self, event: StepEvent) -> None: ...

    def post_message(self, message: Message) -> bool: ...

    def push_screen(self, screen: Any, callback: Any = None) -> Any: ...

    def suspend(self) -> contextlib.AbstractContextManager[None]: ...


STATUS_PADDING = 2  # the status line's padding, a cell each side (the board's CSS)


class Call(Message):
    """A function for the UI thread to run (posted from a job's thread)."""

    def __init__(self, fn: Callable[[], None]) -> None:
        super().__init__()
        self.fn = fn


class BoardHooks:
    """The engine's events, onto the board: its rows update as each step arrives."""

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs

    def on_step(self, event: StepEvent) -> None:
        self.jobs.post(lambda: self.jobs.board.show_step(event))


class Jobs:
    def __init__(self, board: Board) -> None:
        self.board = board
        self.refreshing = False
        self.refresh_again = False
        self.applying = False
        self.leaving = False  # q pressed once during an apply
        self.was_stopped_mid_apply = False
        self.apply_finished = 0.0  # time.time() when the last apply ended
        self.apply_thread: threading.Thread | None = None
        self._apply_loop: asyncio.AbstractEventLoop | None = None
        self._apply_task: asyncio.Task[Any] | None = None
        self._answer: concurrent.futures.Future[bool] | None = None

    # --- plumbing ----------------------------------------------------------------------

    def post(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the UI thread soon; dropped once the board has closed."""
        with contextlib.suppress(RuntimeError):  # the board's loop closed: nobody to tell
            self.board.post_message(Call(fn))

    def waiting(self, vm: str, doing: str) -> contextlib.AbstractContextManager[Any]:
        """The board's status line, while ``s`` or ``l`` waits to reach ``vm``: the step
        under way with its clock and limit ("pve-1: waiting for the guest agent to
        report an address  45s / 300s"), once a second, as an apply's rows show it."""

        said = f"{doing} {vm}… "

        def tick(steps: StepClock) -> None:
            if steps.text:  # on one status line: the clock stays, the words give way
                line = steps.line(self.board.size.width - STATUS_PADDING - len(said))
                self.post(lambda: self.board.say(said + line))

        return watched(tick, every=1.0)

    def spawn(self, name: str, fn: Callable[[], None]) -> threading.Thread:
        thread = threading.Thread(target=fn, name=f"sand-ui-{name}", daemon=True)
        thread.start()
        return thread

    def failed(self, what: str, exc: BaseException) -> None:
        self.post(lambda: self.board.show_error(failure(what, exc)))

    # --- refresh -------------------------------------------------------------------------

    def refresh(self) -> None:
        if self.refreshing:
            self.refresh_again = True
            return
        self.refreshing = True
        self.spawn("refresh", self._refresh)

    def _refresh(self) -> None:
        try:
            snapshot = self.board.fleet.observe()
            self.post(lambda: self.board.show_snapshot(snapshot))
        except Exception as exc:  # a bug or a fault: shown on the board, never a crash
            self.failed("refresh", exc)
        finally:
            self.post(self._refreshed)

    def _refreshed(self) -> None:
        self.refreshing = False
        if self.refresh_again:
            self.refresh_again = False
            self.refresh()

    # --- plan ----------------------------------------------------------------------------

    def plan(self) -> None:
        self.board.say("planning (as sand plan: preflight and unpushed-work sweep)…")

        def run() -> None:
            try:
                plan = self.board.fleet.plan()
            except Exception as exc:
                self.failed("plan", exc)
                return
            self.post(lambda: self._planned(plan))

        self.spawn("plan", run)

    def _planned(self, plan: Plan) -> None:
        self.board.show_plan(plan)
        self.board.say("planned; the detail pane shows the selected VM's change")
        self.board.push_screen(TextScreen("plan", render_text(plan)))

    # --- apply ---------------------------------------------------------------------------

    def apply(self) -> None:
        if self.applying:
            self.board.say("an apply is already running")
            return
        self.applying, self.leaving = True, False
        self.board.state.activity.clear()
        self.board.say("settling the journal and planning (as sand apply)…")
        self.apply_thread = self.spawn("apply", self._apply)

    def _apply(self) -> None:

        hooks = track(BoardHooks(self))  # what quitting mid-apply will say was left

        async def run() -> Any:
            self._apply_loop = asyncio.get_running_loop()
            self._apply_task = asyncio.current_task()
            return await self.board.fleet.apply(self._ask, hooks, self._note)

        said: Callable[[], None] | None = None
        try:
            outcome = asyncio.run(run())
        except asyncio.CancelledError:
            said = partial(self.board.say, "apply stopped; the next sand apply settles it")
        except Exception as exc:
            said = partial(self.board.show_error, failure("apply", exc))
        else:
            said = partial(self._applied, outcome)
        finally:
            self._apply_loop = self._apply_task = None
            # One message: how the apply ended is shown once the board knows it has,
            # so an `a` pressed on reading it starts the next ("already running" else).
            self.post(partial(self._apply_ended, said))

    async def _ask(self, plan: Plan, refusal: str | None) -> bool:
        answer: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._answer = answer
        self.post(lambda: self._confirm(plan, refusal, answer))
        try:
            return await asyncio.wrap_future(answer)
        finally:
            self._answer = None

    def _confirm(
        self, plan: Plan, refusal: str | None, answer: concurrent.futures.Future[bool]
    ) -> None:
        def done(approved: bool | None) -> None:
            if not answer.done():
                answer.set_result(bool(approved))

        self.board.show_plan(plan, "plan")
        screen = ConfirmScreen(render_text(plan), refusal, plan.has_changes)
        self.board.push_screen(screen, done)

    def _note(self, text: str) -> None:
        self.post(lambda: self.board.say(text))

    def _applied(self, outcome: Any) -> None:
        if outcome is None:
            self.board.say("Apply cancelled.")
        elif outcome.result is None:
            self.board.say("No changes. Your VMs match the manifest.")
        else:
            said, warnings = outcome_text(outcome)
            self.board.say(" ".join([said.replace("\n", " "), *warnings]))

    def _apply_ended(self, said: Callable[[], None] | None = None) -> None:
        self.applying, self.leaving = False, False
        if said is not None:
            said()
        self.apply_finished = time.time()
        self.refresh()

    # --- land, shell -----------------------------------------------------------------------

    def land(self, vm: str) -> None:
        self.board.say(f"sweeping {vm}'s checkouts (read-only)…")

        def run() -> None:
            with self.waiting(vm, "sweeping"):
                text = self.board.fleet.land(vm)
            self.post(lambda: self._landed(vm, text))

        self.spawn("land", run)

    def _landed(self, vm: str, text: str) -> None:
        self.board.show_landing(vm, text)
        self.board.say(f"swept {vm}: its landing state is in the detail pane")

    def shell(self, vm: str) -> None:
        self.board.say(f"connecting to {vm}…")

        def run() -> None:
            try:
                with self.waiting(vm, "connecting to"):
                    endpoint = self.board.fleet.endpoint(
                        vm, lambda line: self.post(lambda: self.board.say(line))
                    )
            except Exception as exc:
                self.failed(f"shell {vm}", exc)
                return
            self.post(lambda: self._attach(vm, endpoint))

        self.spawn("shell", run)

    def _attach(self, vm: str, endpoint: Any) -> None:
        try:
            with self.board.suspend():
                code = run_ssh(endpoint, command=tmux_command(vm), tty=True)
        except SuspendNotSupported:
            self.board.say("the shell needs a terminal to hand over; run sand shell " + vm)
            return
        except SandError as exc:
            self.board.show_error(f"shell {vm}: {exc}")
            return
        self.board.say(f"back from {vm}'s shell (exit {code})")
        self.refresh()

    # --- compare ---------------------------------------------------------------------------

    def compare(self, source: str, forks: list[str]) -> None:
        """The compare view of ``source``'s forks, read now and on each ``r`` in it."""
        screen = CompareScreen(source, forks, lambda: self._compare(screen))
        self.board.push_screen(screen)
        self._compare(screen)

    def _compare(self, screen: CompareScreen) -> None:
        forks = screen.forks
        said = screen.text.split("\n\n", 1)[-1] if screen.text else ""
        reading = "reading each fork's guest (read-only)…"
        screen.show(compare_head(forks, reading) + said, True)
        began = time.monotonic()

        def tick(steps: StepClock) -> None:
            # A guest to reach can take minutes (a fork's agent, its SSH): the wait's
            # own clock, and the step under way with its clock against its limit.
            doing = f"{reading} {time.monotonic() - began:.0f}s"
            if steps.text:
                doing += f" · {steps.line()}"
            self.post(lambda: screen.show(compare_head(forks, doing) + said, True))

        def run() -> None:
            try:
                with watched(tick, every=1.0):
                    views = self.board.fleet.compare(forks)
            except Exception as exc:  # a bug or a fault: said in the view, never a crash
                text = str(exc) if isinstance(exc, SandError) else f"{type(exc).__name__}: {exc}"
                self.post(lambda: screen.show(compare_head(forks, f"Error: {shown(text, 300)}")))
                return
            now = time.time()
            table = render_compare(views, now)
            read = time.strftime("read at %H:%M:%S", time.localtime(now))
            self.post(lambda: screen.show(compare_head(forks, read) + table))

        self.spawn("compare", run)

    # --- stopping ---------------------------------------------------------------------------

    def stop(self) -> None:
        """The board is closing: an open question is answered no, an apply cancelled."""
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(False)
        loop, task = self._apply_loop, self._apply_task
        if loop is not None and task is not None:
            self.was_stopped_mid_apply = True
            loop.call_soon_threadsafe(task.cancel)


def failure(what: str, exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, SandError) else f"{type(exc).__name__}: {exc}"
    return f"{what}: {text}"


def compare_head(forks: Sequence[str], said: str) -> str:
    """The compare view's first lines: which forks, what ``sand land --compare`` says
    of them, and when they were read (or what is under way)."""
    names = shown(" ".join(forks), 200)
    return f"sand land --compare {names}\n{said}\n\n"


def render_compare(views: Sequence[ForkView], now: float) -> str:
    """``sand land --compare``'s table, each line fit for the board."""
    return "".join(shown(line, 400) + "\n" for line in render(views, now).splitlines())


def read_detail_files(
    project: str | None, vm: str
) -> tuple[Sequence[Mapping[str, Any]], Sequence[str]]:
    """The selected VM's journal entries and last provisioning log (local files, small)."""
    if project is None:
        return (), ()

    try:
        return Journal(journal_path(project)).entries_for(vm), load_provision_log(project, vm)
    except (OSError, SandError):
        return (), ()
