"""A webhook receiver for the notification tests, and readers of its bodies as Slack and
ntfy read them.

:class:`Receiver` is a real HTTP server on 127.0.0.1 (one thread per connection): it
keeps every POST (path, headers, JSON body) and answers each as the test says -- a
status, or never until released.

:func:`slack_read` and :func:`ntfy_read` find what a reader would make of a body: Slack
turns each ``<...>`` control sequence of ``text`` into a mention (``<!channel>``,
``<!here>``, ``<@U1>``, ``<#C1>``, ``<!subteam^S1>``) or a link (``<url|label>``, ``<url>``),
then shows ``&lt;``, ``&gt;`` and ``&amp;`` as ``<``, ``>`` and ``&`` (its "Escaping text"
rules); ntfy reads ``message`` as plain text unless the JSON's ``markdown`` or the URL's
``md``/``markdown``/``x-markdown`` parameter says Markdown, and then finds CommonMark's
links ``[label](url)``, images ``![alt](url)`` and autolinks ``<scheme:...>``, each
backslash-escaped ASCII punctuation character standing for itself. A URL written out in
full is not counted: it shows as itself.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

HOLD = -1  # an answer: none, until release()


@dataclass
class Post:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


class Receiver:
    """``answer(n)``: the status of the n-th POST (0-based), or :data:`HOLD`."""

    def __init__(self, answer: Callable[[int], int] = lambda _n: 200, path: str = "/hook") -> None:
        self.posts: list[Post] = []
        self.answered = 0
        self.answer = answer
        self.cond = threading.Condition()
        self.released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length", "0"))
                post = Post(self.path, dict(self.headers), json.loads(self.rfile.read(size)))
                with receiver.cond:
                    n = len(receiver.posts)
                    receiver.posts.append(post)
                    receiver.cond.notify_all()
                status = receiver.answer(n)
                if status == HOLD:
                    receiver.released.wait()
                    status = 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                with receiver.cond:
                    receiver.answered += 1
                    receiver.cond.notify_all()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}{path}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, check: Callable[[], bool], timeout: float = 30.0) -> None:
        with self.cond:
            assert self.cond.wait_for(check, timeout), "the receiver never saw it"

    def bodies(self) -> list[dict[str, Any]]:
        with self.cond:
            return [p.body for p in self.posts]

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Read:
    """What a reader shows, and the mentions and labelled links it made."""

    shown: str
    mentions: list[str] = field(default_factory=list)
    links: list[tuple[str, str]] = field(default_factory=list)  # (target, label)


_SLACK_SEQUENCE = re.compile(r"<([^<>]*)>")


def slack_read(body: dict[str, Any]) -> Read:
    read = Read("")

    def turn(found: re.Match[str]) -> str:
        inner = found.group(1)
        if inner[:1] in ("!", "@", "#"):
            read.mentions.append(inner)
            return "@" + inner[1:]
        target, _bar, label = inner.partition("|")
        read.links.append((target, label or target))
        return label or target

    shown = _SLACK_SEQUENCE.sub(turn, str(body["text"]))
    read.shown = shown.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return read


_MARKDOWN_SWITCH = ("x-markdown", "markdown", "md")
_PUNCTUATION = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
_LINK = re.compile(r"(!?)\[([^\[\]]*)\]\(([^()\s]*)\)")
_AUTOLINK = re.compile(r"<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^<>\s]*)>")


def ntfy_markdown(path: str, body: dict[str, Any]) -> bool:
    query = dict((k.lower(), v.lower()) for k, v in parse_qsl(urlsplit(path).query))
    asked = any(query.get(k) in ("1", "yes", "true") for k in _MARKDOWN_SWITCH)
    return body.get("markdown") is True or asked


def ntfy_read(path: str, body: dict[str, Any]) -> Read:
    message = str(body["message"])
    if not ntfy_markdown(path, body):
        return Read(message)
    # Each escaped punctuation character becomes a private-use stand-in, which no
    # pattern below matches, and then itself again.
    hidden = re.sub(
        r"\\([!-/:-@\[-`{-~])", lambda m: chr(0xE000 + _PUNCTUATION.index(m.group(1))), message
    )
    read = Read("")

    def link(found: re.Match[str]) -> str:
        read.links.append((found.group(3), found.group(2)))
        return found.group(2)

    def autolink(found: re.Match[str]) -> str:
        read.links.append((found.group(1), found.group(1)))
        return found.group(1)

    shown = _AUTOLINK.sub(autolink, _LINK.sub(link, hidden))
    read.shown = "".join(
        _PUNCTUATION[ord(c) - 0xE000] if 0xE000 <= ord(c) < 0xE000 + len(_PUNCTUATION) else c
        for c in shown
    )
    return read
