"""The webhook's outbox: notifications POSTed from a thread of their own, never on the
path of the run, the refresh or the read that found them.

A webhook can be slow, down, or never answer: posted in line, four notices to one that
never answered held ``sand apply --watch`` for 43 s. And a fleet can change all at
once: 30 transitions were 30 POSTs in half a second. So:

* :meth:`Outbox.put` only queues, and the queue is bounded by the fleet: one entry per
  VM (at most :data:`MAX_VMS`), holding that VM's sessions' latest transitions (at most
  :data:`MAX_PER_VM`) -- what comes for a VM while the webhook is busy joins its entry,
  and goes as one message (coalesced);
* at most ``per_minute`` POSTs in any minute; a message over that is dropped, and once
  the minute is over what was dropped is said on the console and posted, once;
* a transient failure (no answer, a refused connection, HTTP 429 or 5xx) is tried again
  with exponential backoff on sand's clock; any other is not;
* a webhook that fails for good is said once, and not again until it takes a message
  (then that is said too), however many messages fail meanwhile.

No message of sand's ever quotes the URL (it may be a secret's value): a failure is said
as its HTTP status or the kind of network error only.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable

import tenacity

from sand import __version__, clock
from sand.loops.notice import Transition, body, ntfy_markdown, summary
from sand.terminal import one_line

PER_MINUTE = 10  # POSTs in any 60 s
WINDOW = 60.0
MAX_VMS = 256  # VMs with a message waiting; one more is dropped (and counted)
MAX_PER_VM = 32  # a VM's sessions in one message (agentstate keeps 32 per guest)
NAMED = 8  # VMs a "dropped" notice names; the rest are counted
POST_TIMEOUT = 10.0  # one attempt's patience (sand's clock)
ATTEMPTS = 4  # tries of one message, the first included
CLOSE_GRACE = 5.0  # what a closing outbox gives its queue to go (sand's clock)
USER_AGENT = f"sand/{__version__}"


class WebhookFailure(Exception):
    """Why a POST was not taken, in words that never hold the URL."""

    def __init__(self, why: str, *, transient: bool) -> None:
        super().__init__(why)
        self.why = why
        self.transient = transient


def post(url: str, data: bytes) -> None:
    """One POST of ``data`` (JSON); :class:`WebhookFailure` unless it was taken."""
    request = urllib.request.Request(
        url,
        data=data,
        method="POST",
        headers={"Content-Type": "application/json", "User-Agent": USER_AGENT},
    )
    try:
        with urllib.request.urlopen(request, timeout=clock.real(POST_TIMEOUT)) as answer:
            answer.read(1024)
    except urllib.error.HTTPError as exc:
        exc.close()
        # Too many requests, or the server's own trouble: worth another try; the rest
        # (404: the hook was deleted, 403: its token revoked) will not change by itself.
        transient = exc.code == 429 or exc.code >= 500
        raise WebhookFailure(f"the webhook answered HTTP {exc.code}", transient=transient) from None
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
        reason = getattr(exc, "reason", None)
        cause = reason if isinstance(reason, BaseException) else exc
        kind = one_line(type(cause).__name__, 40)
        why = f"the webhook could not be reached ({kind})"
        raise WebhookFailure(why, transient=not isinstance(cause, ValueError)) from None


class Outbox:
    """One webhook's queue and the thread that empties it (see the module's doc)."""

    def __init__(
        self,
        url: str,
        topic: str | None,
        say: Callable[[str], None],
        *,
        per_minute: int = PER_MINUTE,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url, self.topic, self.say = url, topic, say
        self.markdown = ntfy_markdown(url)
        self.per_minute = per_minute
        self.now = now  # the minute of the cap is a rule's, on the real clock
        self._cond = threading.Condition()
        # VM -> (agent, session) -> its latest transition not yet posted; in arrival order
        self._pending: dict[str, dict[tuple[str, str], Transition]] = {}
        self._posted: deque[float] = deque()  # when each POST of the last minute began
        self._dropped = 0
        self._dropped_vms: list[str] = []  # the first NAMED of them
        self._busy = False  # a POST (with its retries) under way
        self._down = False  # a failure was said, and no POST has been taken since
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._work, name="sand-webhook", daemon=True)
        self._thread.start()

    def put(self, notice: Transition) -> None:
        """Queue ``notice``; returns at once."""
        with self._cond:
            if self._stop.is_set():
                return
            waiting = self._pending.get(notice.vm)
            if waiting is None:
                if len(self._pending) >= MAX_VMS:
                    self._drop(notice.vm, 1)
                    return
                waiting = self._pending[notice.vm] = {}
            # A session's later transition replaces its earlier one, and goes last.
            waiting.pop((notice.agent, notice.session), None)
            waiting[(notice.agent, notice.session)] = notice
            if len(waiting) > MAX_PER_VM:
                del waiting[next(iter(waiting))]
                self._drop(notice.vm, 1)
            self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """Wait (``timeout`` seconds, real) until nothing waits and no POST is under
        way; whether that came."""
        with self._cond:
            return self._cond.wait_for(self._idle, timeout)

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Give the queue ``grace`` seconds (sand's clock) to go, then stop; what was
        left, and what was dropped and not yet said, is said."""
        with self._cond:
            self._cond.wait_for(self._idle, clock.real(grace))
            self._stop.set()
            left = sum(len(w) for w in self._pending.values())
            self._pending.clear()
            dropped = self._take_dropped()
            self._cond.notify_all()
        if left:
            self.say(f"notify: {left} notification(s) not sent: the webhook had not taken them")
        if dropped:
            self.say(f"notify: {dropped}")

    def _idle(self) -> bool:
        return not self._pending and not self._busy

    def _drop(self, vm: str, count: int) -> None:
        self._dropped += count
        if vm not in self._dropped_vms and len(self._dropped_vms) < NAMED:
            self._dropped_vms.append(vm)

    def _take_dropped(self) -> str | None:
        if not self._dropped:
            return None
        named = ", ".join(self._dropped_vms)
        more = len(self._dropped_vms) == NAMED
        said = (
            f"{self._dropped} notification(s) dropped, as at most {self.per_minute} go in"
            f" a minute (for {named}{', ...' if more else ''})"
        )
        self._dropped, self._dropped_vms = 0, []
        return said

    def _next(self) -> tuple[list[Transition], str | None] | None:
        """What to post next, under the cap (None: stop); waits for it."""
        while not self._stop.is_set():
            now = self.now()
            while self._posted and self._posted[0] <= now - WINDOW:
                self._posted.popleft()
            room = len(self._posted) < self.per_minute
            if room and self._dropped:
                self._posted.append(now)
                return [], self._take_dropped()  # the minute is over: say what it dropped
            if self._pending:
                vm = next(iter(self._pending))
                batch = list(self._pending.pop(vm).values())
                if room:
                    self._posted.append(now)
                    return batch, None
                self._drop(vm, len(batch))
                continue
            self._cond.notify_all()  # idle: a close() may be waiting for it
            self._cond.wait(self._posted[0] + WINDOW - now if self._dropped else None)
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                chosen = self._next()
                if chosen is None:
                    return
                self._busy = True
            batch, note = chosen
            try:
                if note is not None:
                    self._tell(f"notify: {note}")
                message = (
                    body(batch, self.topic, markdown=self.markdown)
                    if batch
                    else summary(f"sand: {note}", self.topic, markdown=self.markdown)
                )
                self._send(message)
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _send(self, message: dict[str, object]) -> None:
        data = json.dumps(message).encode()
        try:
            for attempt in tenacity.Retrying(
                stop=self._spent,
                wait=tenacity.wait_exponential(multiplier=1, max=30) + tenacity.wait_random(0, 1),
                retry=tenacity.retry_if_exception(
                    lambda exc: isinstance(exc, WebhookFailure) and exc.transient
                ),
                sleep=self._pause,
                reraise=True,
            ):
                with attempt:
                    post(self.url, data)
        except WebhookFailure as failure:
            if not self._down:
                self._down = True
                self._tell(f"notify: {failure.why}; not said again until the webhook takes one")
            return
        if self._down:
            self._down = False
            self._tell("notify: the webhook takes notifications again")

    def _tell(self, text: str) -> None:
        """Say ``text`` from the worker: a console whose reader left must not end it."""
        with contextlib.suppress(OSError, ValueError):
            self.say(text)

    def _pause(self, seconds: float) -> None:
        """A backoff's wait, on sand's clock; cut short by :meth:`close`."""
        self._stop.wait(clock.real(seconds))

    def _spent(self, state: tenacity.RetryCallState) -> bool:
        """No other try: the attempts are spent, or the outbox is closing."""
        return state.attempt_number >= ATTEMPTS or self._stop.is_set()
