"""What a notification says (``notify:``), and how each reader is kept from reading
more into it than sand put there.

Part of each notice is the guest's word: its session ids and working directories come
from ``agents.json``, which anything running in the guest can write. A chat reader
parses text: Slack turns ``<!channel>`` into a mention of everyone in the channel and
``<https://a|b>`` into a link labelled b, and ntfy renders Markdown (``[b](https://a)``)
when the message says it is Markdown. So guest text is made one printable line and cut
short (again: :mod:`sand.agentstate` did it once, and a notice may be built from a
status row read back), Slack's ``text`` escapes ``&``, ``<`` and ``>`` as Slack's
"Escaping text" rules ask (the only three characters its control sequences need), and
ntfy is told the message is plain text (``markdown: false``), which ntfy shows as it
is -- unless the webhook's URL itself asks ntfy for Markdown (``?md=1``, which a JSON
``markdown: false`` does not undo): then every ASCII punctuation character is
backslash-escaped, as CommonMark allows for each, and shows as itself.

A URL written out in full still shows as itself (both readers may make it clickable):
what no guest can make is a mention, or a link whose words hide where it goes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from urllib.parse import parse_qsl, urlsplit

from sand.agentstate import state_words
from sand.terminal import one_line

SESSION_LIMIT = 64  # a session id as agentstate keeps it
CWD_LIMIT = 200  # a directory as agentstate keeps it
TEXT_LIMIT = 3000  # a whole notice: far under Slack's 40,000 and ntfy's 4,096 bytes


# ntfy's switch for Markdown, as a header or a query parameter of the URL, and the
# values it takes for yes.
_NTFY_MARKDOWN = frozenset({"x-markdown", "markdown", "md"})
_NTFY_YES = frozenset({"1", "yes", "true"})
_ASCII_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def slack_escaped(text: str) -> str:
    """``text`` as Slack reads it literally: no mention, channel, date or link can form."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_escaped(text: str) -> str:
    """``text`` as CommonMark reads it literally: each ASCII punctuation character
    backslash-escaped, so none opens a link, an image, an autolink or emphasis."""
    return _ASCII_PUNCTUATION.sub(r"\\\1", text)


def ntfy_markdown(url: str) -> bool:
    """Whether ``url`` asks ntfy to read messages as Markdown (``?md=1``,
    ``?markdown=yes``, ``?content-type=text/markdown``)."""
    for key, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        key, value = key.lower(), value.lower()
        if key in _NTFY_MARKDOWN and value in _NTFY_YES:
            return True
        if key in ("content-type", "content_type") and value.startswith("text/markdown"):
            return True
    return False


@dataclass(frozen=True)
class Transition:
    vm: str
    agent: str
    session: str
    state: str
    since: int
    cwd: str

    def __post_init__(self) -> None:
        # The guest's fields, however this was made: one line, no controls, cut short.
        object.__setattr__(self, "session", one_line(self.session, SESSION_LIMIT))
        object.__setattr__(self, "cwd", one_line(self.cwd, CWD_LIMIT))

    @property
    def title(self) -> str:
        return f"sand: {self.vm} {self.agent} {state_words(self.state)}"

    def text(self) -> str:
        where = f" in {self.cwd}" if self.cwd else ""
        return f"{self.vm}: {self.agent} session {self.session} {state_words(self.state)}{where}"

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def body(
    notices: Sequence[Transition], topic: str | None, *, markdown: bool = False
) -> dict[str, object]:
    """One JSON body for both readers, of one VM's transitions (one, or several that
    came while the webhook was busy): Slack takes ``text``; ntfy (posted to its server
    with a ``topic``) takes ``title``, ``message`` and ``tags``. One transition's fields
    are also at the top (vm, agent, session, state, since, cwd); ``transitions`` holds
    them all. ``markdown``: the URL makes ntfy read Markdown (:func:`ntfy_markdown`)."""
    last = notices[-1]
    text = joined([t.text() for t in notices])
    title = last.title if len(notices) == 1 else f"sand: {last.vm}: {len(notices)} agent sessions"
    out: dict[str, object] = {
        "text": slack_escaped(text),
        "title": title,
        "message": markdown_escaped(text) if markdown else text,
        "markdown": markdown,
        "tags": sorted({t.state for t in notices}),
        **last.to_json(),
        "transitions": [t.to_json() for t in notices],
    }
    if topic:
        out["topic"] = topic
    return out


def summary(text: str, topic: str | None, *, markdown: bool = False) -> dict[str, object]:
    """A notice of sand's own (what was dropped), in the same two readers' fields."""
    out: dict[str, object] = {
        "text": slack_escaped(text),
        "title": "sand: notifications dropped",
        "message": markdown_escaped(text) if markdown else text,
        "markdown": markdown,
        "tags": ["warning"],
    }
    if topic:
        out["topic"] = topic
    return out


def joined(lines: Sequence[str]) -> str:
    """Lines of a notice, joined; the whole cut at :data:`TEXT_LIMIT`."""
    text = "\n".join(lines)
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 1] + "…"
