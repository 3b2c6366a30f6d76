"""Guest-written text in a notification: a guest whose agents.json holds Slack's control
sequences and Markdown links makes no mention and no link in either reader, and each
shows the guest's characters as they were (made one printable line).

The notices go through :class:`sand.loops.notify.Announcer`, as a watch's, a sync's or
the board's do, to a real HTTP receiver; its bodies are read as Slack and ntfy read them
(``tests/loops/webhook_rig.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sand.agentstate import AgentReport, parse_state
from sand.loops.notify import Announcer
from sand.manifest import load_manifest
from tests.loops.webhook_rig import Receiver, ntfy_read, slack_read

SESSION = "<!channel> <@U024BE7LH> [ok](https://evil.example/s)"
CWD = (
    "/w/<https://evil.example/login|Approve the deploy> <!here> <!subteam^S0> "
    "[click](https://evil.example/a) ![i](https://evil.example/i.png) "
    "<https://evil.example/b> &lt;!everyone&gt; \x1b]8;;https://evil.example\x07x\x1b]8;;\x07"
)


def manifest(tmp_path: Path, url: str, vms: int = 1) -> Path:
    path = tmp_path / "sand.yaml"
    names = "".join(f"  - name: dev-{i}\n    image: debian-12\n" for i in range(1, vms + 1))
    path.write_text(
        "apiVersion: sand/v1\nproject: demo\nbackends:\n  laptop: {type: lima}\n"
        f"vms:\n{names}notify:\n  webhook: {{url: '{url}'}}\n  debounce: 0\n"
    )
    return path


def guest_file(session: str, cwd: str, state: str = "needs-input") -> AgentReport:
    """What the guest's agents.json says, parsed as sand parses it."""
    record = {"agent": "claude", "session": session, "state": state, "since": 1, "cwd": cwd}
    return parse_state(json.dumps({"sessions": [record]}).encode())


@pytest.mark.parametrize("query", ["", "?md=1"], ids=["plain", "url-asks-markdown"])
def test_a_hostile_guest_makes_no_mention_or_link_in_slack_or_ntfy(
    tmp_path: Path, query: str
) -> None:
    receiver = Receiver(path=f"/hook{query}")
    said: list[str] = []
    announce = Announcer(say=said.append)
    loaded = load_manifest(manifest(tmp_path, receiver.url))
    try:
        announce(loaded, {"dev-1": AgentReport()})  # the first read: where things stand
        announce(loaded, {"dev-1": guest_file(SESSION, CWD)})
        receiver.wait_for(lambda: len(receiver.posts) == 1)
    finally:
        announce.close()
        receiver.close()
    (post,) = receiver.posts
    report = guest_file(SESSION, CWD)
    (session,) = report.sessions
    expected = f"dev-1: claude session {session.session} needs input in {session.cwd}"
    assert "<!channel>" in expected and "[click](https" in expected  # the guest's, kept

    slack = slack_read(post.body)
    assert (slack.mentions, slack.links) == ([], [])
    assert slack.shown == expected

    ntfy = ntfy_read(post.path, post.body)
    assert (ntfy.mentions, ntfy.links) == ([], [])
    assert ntfy.shown == expected
    assert post.body["title"] == "sand: dev-1 claude needs input"
    assert "\x1b" not in json.dumps(post.body) and "\\u001b" not in json.dumps(post.body)


def test_the_readers_of_the_test_find_what_the_guest_wrote_when_nothing_escapes_it() -> None:
    """The readers above are not blind: the same text, unescaped, is full of mentions
    and links to them."""
    text = f"dev-1: claude session {SESSION} needs input in {CWD}"
    slack = slack_read({"text": text})
    assert slack.mentions == ["!channel", "@U024BE7LH", "!here", "!subteam^S0"]
    assert ("https://evil.example/login", "Approve the deploy") in slack.links
    ntfy = ntfy_read("/hook?md=1", {"message": text})
    assert ("https://evil.example/a", "click") in ntfy.links
    assert ("https://evil.example/i.png", "i") in ntfy.links
    assert ntfy_read("/hook", {"message": text}).links == []  # plain text: as it is
