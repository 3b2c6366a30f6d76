"""The webhook off the run's path: a webhook that never answers delays no read, a flood
is capped and what was dropped is said once, transient failures are tried again, a dead
webhook is said once, and every POST names sand and its version.

Each against a real HTTP receiver (``tests/loops/webhook_rig.py``), through
:class:`sand.loops.notify.Announcer` (what a watch's, a sync's and the board's reads
call) or the outbox it posts through.
"""

from __future__ import annotations

import json
import socketserver
import threading
from pathlib import Path

import pytest

from sand import __version__
from sand.agentstate import AgentReport
from sand.loops.notice import Transition
from sand.loops.notify import Announcer
from sand.loops.outbox import PER_MINUTE, Outbox
from sand.manifest import load_manifest
from tests.loops.test_notify_hostile import guest_file, manifest
from tests.loops.webhook_rig import HOLD, Receiver


class Told:
    """An :class:`Announcer` for a manifest of ``vms`` VMs (dev-1...) whose webhook is
    ``receiver``, its first read (no session anywhere) made."""

    def __init__(self, tmp_path: Path, receiver: Receiver, vms: int = 1) -> None:
        self.said: list[str] = []
        self.announce = Announcer(say=self.said.append)
        self.loaded = load_manifest(manifest(tmp_path, receiver.url, vms=vms))
        self.first = {f"dev-{i}": AgentReport() for i in range(1, vms + 1)}
        self.announce(self.loaded, self.first)

    def tell(self, vm: str, session: str, state: str = "needs-input") -> None:
        """A read in which ``vm``'s ``session`` arrived in ``state``."""
        self.announce(self.loaded, {**self.first, vm: guest_file(session, "/w", state)})

    def flood(self) -> None:
        """A read in which every VM's session arrived in needs-input."""
        self.announce(self.loaded, {vm: guest_file("s-1", "/w") for vm in self.first})

    def notes(self) -> list[str]:
        return [s for s in self.said if s.startswith("notify: ")]


def test_a_webhook_that_never_answers_holds_up_no_read(tmp_path: Path) -> None:
    """Four reads that each tell a transition all return while the receiver still holds
    the first POST's connection, unanswered: the posts wait, the reads do not."""
    events: list[str] = []
    lock = threading.Lock()

    def hold(_n: int) -> int:
        with lock:
            events.append("received")
        return HOLD

    receiver = Receiver(answer=hold)
    told = Told(tmp_path, receiver, vms=4)
    try:
        for vm in told.first:
            told.tell(vm, f"s-{vm}")
            with lock:
                events.append(f"read told {vm}")
        receiver.wait_for(lambda: len(receiver.posts) == 1)
        with lock:
            order = list(events)
        assert receiver.answered == 0  # the connection is still held
    finally:
        told.announce.close(grace=0)
        receiver.close()
    assert [e for e in order if e.startswith("read")] == [f"read told dev-{i}" for i in range(1, 5)]
    assert order.count("received") == 1
    assert told.notes() == ["notify: 3 notification(s) not sent: the webhook had not taken them"]


def test_a_flood_is_capped_and_what_was_dropped_is_said_once(tmp_path: Path) -> None:
    receiver = Receiver()
    told = Told(tmp_path, receiver, vms=30)
    try:
        told.flood()  # 30 transitions at once
        told.announce.close(grace=30)  # waits until the queue is empty (or 30 s), then ends
    finally:
        receiver.close()
    assert len([s for s in told.said if s.startswith("agent: ")]) == 30  # each on the console
    assert 0 < len(receiver.posts) <= PER_MINUTE
    (dropped,) = told.notes()
    posted = {body["vm"] for body in receiver.bodies()}
    head = f"notify: {30 - len(posted)} notification(s) dropped, as at most {PER_MINUTE} go in"
    assert dropped.startswith(f"{head} a minute (for ") and dropped.endswith(", ...)")
    named = dropped.removeprefix(f"{head} a minute (for ").removesuffix(", ...)").split(", ")
    assert len(named) == 8 and not posted & set(named)


def transition(vm: str, session: str = "s-1", state: str = "needs-input") -> Transition:
    return Transition(vm, "claude", session, state, 1, "/w")


def test_once_the_minute_is_over_what_it_dropped_is_posted_before_what_comes_next() -> None:
    receiver = Receiver()
    said: list[str] = []
    minute = [0.0]
    outbox = Outbox(receiver.url, None, said.append, now=lambda: minute[0])
    try:
        for i in range(PER_MINUTE + 2):
            outbox.put(transition(f"dev-{i}"))
        assert outbox.wait_idle(30)
        assert len(receiver.posts) == PER_MINUTE
        minute[0] = 60.0
        outbox.put(transition("dev-late"))
        receiver.wait_for(lambda: len(receiver.posts) == PER_MINUTE + 2)
        assert outbox.wait_idle(30)
    finally:
        outbox.close(grace=0)
        receiver.close()
    notice, late = receiver.bodies()[PER_MINUTE:]
    assert notice["message"].startswith("sand: 2 notification(s) dropped")
    assert notice["title"] == "sand: notifications dropped"
    assert late["vm"] == "dev-late"
    assert len([s for s in said if "dropped" in s]) == 1


def test_what_comes_for_a_vm_while_the_webhook_is_busy_goes_as_one_message() -> None:
    gate = threading.Event()
    receiver = Receiver(answer=lambda n: HOLD if n == 0 else 200)
    receiver.released = gate
    outbox = Outbox(receiver.url, None, lambda _s: None)
    try:
        outbox.put(transition("dev-0"))
        receiver.wait_for(lambda: len(receiver.posts) == 1)  # busy with dev-0
        outbox.put(transition("dev-1", "a"))
        outbox.put(transition("dev-1", "b"))
        outbox.put(transition("dev-1", "a", "done"))  # a's later state replaces its earlier
        gate.set()
        receiver.wait_for(lambda: len(receiver.posts) == 2)
        assert outbox.wait_idle(30)
    finally:
        outbox.close(grace=0)
        receiver.close()
    merged = receiver.bodies()[1]
    assert [(t["session"], t["state"]) for t in merged["transitions"]] == [
        ("b", "needs-input"),
        ("a", "done"),
    ]
    assert merged["text"] == (
        "dev-1: claude session b needs input in /w\ndev-1: claude session a done in /w"
    )


@pytest.mark.sand_time_scale(0.01)
def test_a_transient_failure_is_tried_again_and_said_nowhere(tmp_path: Path) -> None:
    receiver = Receiver(answer=lambda n: 503 if n < 2 else 200)
    told = Told(tmp_path, receiver)
    try:
        told.tell("dev-1", "s-1")
        receiver.wait_for(lambda: receiver.answered == 3)
        told.announce.close(grace=30)
    finally:
        receiver.close()
    assert [b["vm"] for b in receiver.bodies()] == ["dev-1"] * 3
    assert told.notes() == []


def test_a_dead_webhook_is_said_once_and_its_return_once(tmp_path: Path) -> None:
    dead = [True]
    receiver = Receiver(answer=lambda _n: 404 if dead[0] else 200)
    told = Told(tmp_path, receiver, vms=3)
    try:
        for n, vm in enumerate(told.first, start=1):
            told.tell(vm, f"s-{vm}")
            receiver.wait_for(lambda n=n: receiver.answered == n)
        dead[0] = False
        told.tell("dev-1", "s-again", "done")
        receiver.wait_for(lambda: receiver.answered == 4)
        told.announce.close(grace=30)
    finally:
        receiver.close()
    assert told.notes() == [
        "notify: the webhook answered HTTP 404; not said again until the webhook takes one",
        "notify: the webhook takes notifications again",
    ]
    assert len(receiver.posts) == 4  # a 404 is not tried again


def test_each_post_names_sand_and_its_version(tmp_path: Path) -> None:
    receiver = Receiver()
    told = Told(tmp_path, receiver)
    try:
        told.tell("dev-1", "s-1")
        receiver.wait_for(lambda: len(receiver.posts) == 1)
    finally:
        told.announce.close()
        receiver.close()
    assert receiver.posts[0].headers["User-Agent"] == f"sand/{__version__}"
    assert receiver.posts[0].headers["Content-Type"] == "application/json"


class Garbler:
    """A server whose first answer is not HTTP at all, and every later one a 200."""

    def __init__(self) -> None:
        self.requests: list[bytes] = []
        self.cond = threading.Condition()
        garbler = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                head = b""
                while not head.endswith(b"\r\n\r\n"):
                    head += self.rfile.read(1)
                size = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                with garbler.cond:
                    garbler.requests.append(self.rfile.read(size))
                    first = len(garbler.requests) == 1
                    garbler.cond.notify_all()
                answer = b"SMTP ready\r\n\r\n" if first else b"HTTP/1.0 200 OK\r\n\r\n"
                self.wfile.write(answer)

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.sand_time_scale(0.01)
def test_an_answer_that_is_not_http_is_tried_again_and_the_outbox_goes_on() -> None:
    server = Garbler()
    said: list[str] = []
    outbox = Outbox(server.url, None, said.append)
    try:
        outbox.put(transition("dev-1"))
        outbox.put(transition("dev-2"))
        with server.cond:
            assert server.cond.wait_for(lambda: len(server.requests) == 3, 30)
        assert outbox.wait_idle(30)
    finally:
        outbox.close(grace=0)
        server.close()
    vms = [json.loads(r)["vm"] for r in server.requests]
    assert vms == ["dev-1", "dev-1", "dev-2"]
    assert said == []
