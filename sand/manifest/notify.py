"""``notify:``: who hears of an agent that needs a person, is done, or failed
(docs/agents.md). A webhook (a JSON POST that ntfy and Slack both read) and, for
``sand ui`` and ``sand apply --watch`` on a desktop, the terminal bell and
notify-send/osascript. Each fires once per transition, never for a flap shorter
than ``debounce`` seconds."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from sand.manifest.fields import EnvName, Strict, rule
from sand.manifest.values import control_problem

NotifyState = Literal["needs-input", "done", "failed"]
NOTIFY_STATES: tuple[NotifyState, ...] = ("needs-input", "done", "failed")


def webhook_url_problem(url: str) -> str | None:
    """An http(s) URL on one line; never quoted back (it may carry a token)."""
    if control_problem(url) or any(ch.isspace() for ch in url):
        return "the webhook URL holds a space or a control character"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "the webhook URL must be an http:// or https:// URL with a host"
    return None


WebhookUrl = Annotated[str, rule(webhook_url_problem)]


class Webhook(Strict):
    url: WebhookUrl | None = Field(
        default=None,
        description="Where to POST: an http(s) URL. One that holds a token belongs in a "
        "secret: use `secret` instead.",
        examples=["https://hooks.slack.com/services/T000/B000/XXXX"],
    )
    secret: EnvName | None = Field(
        default=None,
        description="Name of a secret (in `secrets`) whose value is the URL: it is never "
        "printed, logged or put in argv.",
        examples=["NTFY_URL"],
    )
    topic: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")] | None = Field(
        default=None,
        description="An ntfy topic, sent in the body: then `url` is the ntfy server "
        "(https://ntfy.sh), which reads the JSON as title, message and tags.",
        examples=["my-agents"],
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Webhook:
        if (self.url is None) == (self.secret is None):
            raise ValueError("a webhook takes exactly one of 'url' or 'secret'")
        return self


class Notify(Strict):
    webhook: Webhook | None = Field(
        default=None,
        description="A JSON POST per notification: `text` (Slack), `title`/`message`/"
        "`tags`/`topic` (ntfy), and vm, agent, session, state, since, cwd.",
        examples=[{"url": "https://ntfy.sh", "topic": "my-agents"}],
    )
    desktop: bool = Field(
        default=False,
        description="In `sand ui` and `sand apply --watch`: the terminal bell and a desktop "
        "notification (notify-send on Linux, osascript on macOS).",
        examples=[True],
    )
    # Not "on": YAML 1.1 reads that key as the boolean true.
    states: list[NotifyState] = Field(
        default_factory=lambda: list(NOTIFY_STATES),
        min_length=1,
        description="The states whose arrival is told: needs-input, done, failed (all three "
        "by default).",
        examples=[["needs-input", "failed"]],
    )
    debounce: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="Seconds a session must stay in the state before it is told: a flap "
        "shorter than this is never told.",
        examples=[30],
    )
