"""A desktop notification for an agent's transition (``notify: {desktop: true}``): the
terminal bell, then notify-send (Linux) or osascript (macOS) when one is there.

Only sand's own words reach their argv: the VM's name (a manifest name), the agent (a
closed set) and the state (a closed set) -- never a session id or directory the
guest wrote, and never a webhook URL.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import sys
from collections.abc import Callable

from sand.agentstate import state_words
from sand.loops.notify import Transition

# osascript reads the words as its script's arguments: nothing is parsed as AppleScript.
_OSASCRIPT = ("on run argv", "display notification (item 2 of argv) with title (item 1 of argv)",
              "end run")  # fmt: skip


def desktop_argv(t: Transition, platform: str = sys.platform) -> list[str] | None:
    title, text = "sand", f"{t.vm}: {t.agent} {state_words(t.state)}"
    if platform == "darwin" and shutil.which("osascript"):
        lines = [arg for line in _OSASCRIPT for arg in ("-e", line)]
        return ["osascript", *lines, title, text]
    if shutil.which("notify-send"):
        return ["notify-send", "--app-name=sand", title, text]
    return None


def tell_desktop(t: Transition, bell: Callable[[], None]) -> None:
    bell()
    argv = desktop_argv(t)
    if argv is None:
        return
    # A desktop that cannot show it is no error: the console line said it already.
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, timeout=5, check=False,
        )  # fmt: skip


def terminal_bell() -> None:
    if sys.stderr.isatty():
        sys.stderr.write("\a")
        sys.stderr.flush()
