"""The one confirmation rule: only the word ``yes`` approves, as Terraform's prompt."""

from __future__ import annotations

import contextlib


def confirm(question: str, *, prompt: str = "  Enter a value: ", assumed: bool = False) -> bool:
    """Ask ``question``; True only if the person types ``yes``. ``assumed``: a flag
    (``--yes``) already said it, which is shown instead of asking."""
    print(question)
    if assumed:
        print(prompt + "yes (given on the command line)")
        return True
    with contextlib.suppress(EOFError):
        return input(prompt).strip() == "yes"
    return False
