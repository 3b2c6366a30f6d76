"""Telling people when an agent needs them, is done, or failed (``notify:``).

Whoever reads the agents' state again and again (the board, ``sand apply --watch``,
``sand sync``) hands each read to :meth:`Notifier.seen`; it answers with the
transitions worth telling, once each. A transition is a session's arrival in a
state the manifest lists (needs-input, done, failed): told once that session has been
in it for ``debounce`` seconds -- by the guest's clock (its ``since``) or by this
host's (how long reads have shown it so), whichever says longer -- so a flap shorter
than the debounce is never told. What the first read shows is where things stand,
not news: it is remembered, not told (a restarted sync does not repeat the day).

The webhook is a JSON POST made from this process (no argv holds the URL), off the
caller's path (:mod:`sand.loops.outbox`); what it says, and how guest text in it is
kept inert for Slack and ntfy, is :mod:`sand.loops.notice`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field

from sand.agentstate import AgentReport
from sand.errors import SecretError
from sand.loops.notice import Transition
from sand.loops.outbox import CLOSE_GRACE, Outbox
from sand.manifest.loader import LoadedManifest
from sand.manifest.notify import Notify, webhook_url_problem
from sand.secrets import resolve_secrets

__all__ = ["Announcer", "Notifier", "Transition", "webhook_url"]

Key = tuple[str, str, str]  # vm, agent, session


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

    def seen(
        self, reports: Mapping[str, AgentReport], fleet: Collection[str] | None = None
    ) -> list[Transition]:
        """The transitions in this read that are to be told now (each once). ``fleet``:
        the manifest's VMs; what is known of a VM neither in it nor in this read is
        forgotten."""
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
        self._forget(reports, current, {*reports, *(fleet or ())})
        self.primed = True
        return out

    def _forget(
        self,
        reports: Mapping[str, AgentReport],
        current: set[tuple[str, str, str, str, int]],
        fleet: Collection[str],
    ) -> None:
        """Keep the memory as small as the fleet's sessions: forget each VM no longer in
        the fleet, and each session a VM's read no longer lists. A VM whose read failed
        (a problem and no sessions) keeps what is known of it, so that the next good
        read does not tell again what was told."""
        self.first_seen = {m: t for m, t in self.first_seen.items() if m in current}
        listed = {mark[:3] for mark in current}
        read = {vm for vm, r in reports.items() if r.sessions or r.problem is None}
        members = set(fleet)
        self.told = {
            key: was
            for key, was in self.told.items()
            if key[0] in members and (key[0] not in read or key in listed)
        }


def webhook_url(loaded: LoadedManifest) -> str | None:
    """The webhook's URL: as written, or the value of the secret it names (resolved as
    every secret is, and so redacted wherever sand prints or logs)."""
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


@dataclass
class Announcer:
    """What ``sand apply --watch``, ``sand sync`` and the board do with each read: tell
    each new transition (said on the console, on the desktop when asked, and queued for
    the webhook: :class:`sand.loops.outbox.Outbox` posts it off the caller's path).
    The notifier is made from the manifest on the first read, and again when its
    ``notify:`` changes. :meth:`close` at the end gives the queue a moment to go."""

    say: Callable[[str], None]
    desktop: Callable[[Transition], None] | None = None
    _for: Notify | None = None
    _notifier: Notifier | None = None
    _outbox: Outbox | None = None

    def __call__(self, loaded: LoadedManifest, reports: Mapping[str, AgentReport]) -> None:
        config = loaded.manifest.notify
        if config is None:
            self.close(grace=0)
            self._for = self._notifier = None
            return
        if self._notifier is None or config != self._for:
            self.close(grace=0)
            self._for, self._notifier = config, Notifier(config, webhook_url(loaded))
            url, hook = self._notifier.url, config.webhook
            if url is not None and hook is not None:
                self._outbox = Outbox(url, hook.topic, self.say)
        fleet = [vm.name for vm in loaded.manifest.vms]
        for t in self._notifier.seen(reports, fleet):
            self.say(f"agent: {t.text()}")
            if self.desktop is not None and config.desktop:
                self.desktop(t)
            if self._outbox is not None:
                self._outbox.put(t)

    def close(self, grace: float = CLOSE_GRACE) -> None:
        """Stop posting, once what is queued has had ``grace`` seconds to go."""
        outbox, self._outbox = self._outbox, None
        if outbox is not None:
            outbox.close(grace)
