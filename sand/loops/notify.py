"""Telling people when an agent needs them, is done, or failed (``notify:``).

Whoever reads the agents' state again and again (the board, ``sand apply --watch``,
``sand sync``) hands each read to :meth:`Notifier.seen`; it answers with the
transitions worth telling, once each. A transition is a session's arrival in a
state the manifest lists (needs-input, done, failed): told once that session has been
in it for ``debounce`` seconds -- by the guest's clock (its ``since``) or by this
host's (how long reads have shown it so), whichever says longer -- so a flap shorter
than the debounce is never told. What the first read shows is where things stand,
not news: it is remembered, not told (a restarted sync does not repeat the day).

The webhook is a JSON POST made here, from this process (no argv holds the URL); its
URL may be a secret's value, and no message of sand's ever quotes it: a failure is
said as its HTTP status or its kind only.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sand.agentstate import AgentReport, state_words
from sand.manifest.loader import LoadedManifest
from sand.manifest.notify import Notify
from sand.terminal import one_line

Key = tuple[str, str, str]  # vm, agent, session
POST_TIMEOUT = 10.0


@dataclass(frozen=True)
class Transition:
    vm: str
    agent: str
    session: str
    state: str
    since: int
    cwd: str

    @property
    def title(self) -> str:
        return f"sand: {self.vm} {self.agent} {state_words(self.state)}"

    def text(self) -> str:
        where = f" in {self.cwd}" if self.cwd else ""
        return f"{self.vm}: {self.agent} session {self.session} {state_words(self.state)}{where}"

    def body(self, topic: str | None) -> dict[str, object]:
        """One JSON body for both readers: Slack takes ``text``; ntfy (posted to its
        server with a ``topic``) takes ``title``, ``message`` and ``tags``."""
        text = self.text()
        body: dict[str, object] = {
            "text": text,
            "title": self.title,
            "message": text,
            "tags": [self.state],
            "vm": self.vm,
            "agent": self.agent,
            "session": self.session,
            "state": self.state,
            "since": self.since,
            "cwd": self.cwd,
        }
        if topic:
            body["topic"] = topic
        return body


@dataclass
class Notifier:
    config: Notify
    url: str | None = None  # the webhook's, resolved (a secret's value, perhaps)
    clock: Callable[[], float] = time.time
    # (vm, agent, session) -> (state, since) already told, or known at the first read
    told: dict[Key, tuple[str, int]] = field(default_factory=dict)
    # (vm, agent, session, state, since) -> when this host first saw it
    first_seen: dict[tuple[str, str, str, str, int], float] = field(default_factory=dict)
    primed: bool = False

    def seen(self, reports: Mapping[str, AgentReport]) -> list[Transition]:
        """The transitions in this read that are to be told now (each once)."""
        now = self.clock()
        out: list[Transition] = []
        current: set[tuple[str, str, str, str, int]] = set()
        for vm, report in sorted(reports.items()):
            for s in report.sessions:
                key: Key = (vm, s.agent, s.session)
                mark = (*key, s.state, s.since)
                current.add(mark)
                first = self.first_seen.setdefault(mark, now)
                if not self.primed or s.state not in self.config.states:
                    self.told[key] = (s.state, s.since)
                    continue
                if self.told.get(key) == (s.state, s.since):
                    continue
                held = max(now - first, now - s.since)
                if held >= self.config.debounce:
                    self.told[key] = (s.state, s.since)
                    out.append(Transition(vm, s.agent, s.session, s.state, s.since, s.cwd))
        # Forget what is no longer there: the maps stay as small as the fleet's sessions.
        self.first_seen = {m: t for m, t in self.first_seen.items() if m in current}
        self.primed = True
        return out

    def post(self, transition: Transition) -> str | None:
        """POST ``transition`` to the webhook; None when it was taken, else why not, in
        words that never hold the URL."""
        if self.url is None or self.config.webhook is None:
            return None
        data = json.dumps(transition.body(self.config.webhook.topic)).encode()
        request = urllib.request.Request(
            self.url, data=data, method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=POST_TIMEOUT) as answer:
                answer.read(1024)
        except urllib.error.HTTPError as exc:
            return f"the webhook answered HTTP {exc.code}"
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None)
            cause = reason if isinstance(reason, BaseException) else exc
            kind = type(cause).__name__
            return f"the webhook could not be reached ({one_line(kind, 40)})"
        return None


def webhook_url(loaded: LoadedManifest) -> str | None:
    """The webhook's URL: as written, or the value of the secret it names (resolved as
    every secret is, and so redacted wherever sand prints or logs)."""
    from sand.errors import SecretError
    from sand.manifest.notify import webhook_url_problem
    from sand.secrets import resolve_secrets

    notify = loaded.manifest.notify
    hook = notify.webhook if notify is not None else None
    if hook is None or hook.secret is None:
        return hook.url if hook is not None else None
    values = resolve_secrets(
        loaded.manifest, loaded.directory, [hook.secret], from_repository=loaded.from_repository
    )
    url = values[hook.secret].reveal()
    if webhook_url_problem(url):
        raise SecretError(f"secret {hook.secret!r} (notify.webhook) is not an http(s) URL")
    return url


def notifier(loaded: LoadedManifest) -> Notifier | None:
    """The manifest's notifier, its webhook URL resolved; None when it asks for none."""
    config = loaded.manifest.notify
    return Notifier(config, webhook_url(loaded)) if config is not None else None


@dataclass
class Announcer:
    """What ``sand apply --watch``, ``sand sync`` and the board do with each read: tell
    each new transition (said on the console, on the desktop when asked, POSTed to the
    webhook). The notifier is made from the manifest on the first read, and again
    when its ``notify:`` changes."""

    say: Callable[[str], None]
    desktop: Callable[[Transition], None] | None = None
    _for: Notify | None = None
    _notifier: Notifier | None = None

    def __call__(self, loaded: LoadedManifest, reports: Mapping[str, AgentReport]) -> None:
        config = loaded.manifest.notify
        if config is None:
            self._for = self._notifier = None
            return
        if self._notifier is None or config != self._for:
            self._for, self._notifier = config, notifier(loaded)
        assert self._notifier is not None
        for t in self._notifier.seen(reports):
            self.say(f"agent: {t.text()}")
            if self.desktop is not None and config.desktop:
                self.desktop(t)
            why = self._notifier.post(t)
            if why is not None:
                self.say(f"notify: {why}")
