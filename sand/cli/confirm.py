"""The one confirmation rule: only the word ``yes`` approves, as Terraform's prompt.

The CLI asks on the terminal (:func:`confirm`); the board of ``sand ui`` asks in a
dialog with the same question and the same rule (:func:`approves`)."""

from __future__ import annotations

import contextlib


def approves(answer: str) -> bool:
    """Whether a person's answer approves: the word ``yes``, nothing else."""
    return answer.strip() == "yes"


def apply_question(destroy: bool = False) -> str:
    """What ``sand apply`` (and ``sand destroy``) ask before anything changes."""
    what = "destroy all managed VMs" if destroy else "perform these actions"
    return f"Do you want to {what}? Only 'yes' will be accepted."


def confirm(question: str, *, prompt: str = "  Enter a value: ", assumed: bool = False) -> bool:
    """Ask ``question``; True only if the person types ``yes``. ``assumed``: a flag
    (``--yes``) already said it, which is shown instead of asking."""
    print(question)
    if assumed:
        print(prompt + "yes (given on the command line)")
        return True
    with contextlib.suppress(EOFError):
        return approves(input(prompt))
    return False
