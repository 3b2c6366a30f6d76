"""Which VMs the engine is in the middle of, so Ctrl-C can say what it left.

A ``Hooks`` that passes every event on to the view (dropping a view whose reader
has gone) and remembers each VM's last phase until that VM is done or failed. One
per process: an interrupt is reported by ``sand.cli.main``, far from the apply that
was running.
"""

from __future__ import annotations

from sand.apply.events import Hooks, NoHooks, Phase, StepEvent


class InFlight:
    def __init__(self, view: Hooks) -> None:
        self.view = view
        self.phases: dict[str, Phase] = {}

    def on_step(self, event: StepEvent) -> None:
        if event.phase.final:
            self.phases.pop(event.vm, None)
        else:
            self.phases[event.vm] = event.phase
        try:
            self.view.on_step(event)
        except BrokenPipeError:
            # Whoever read the progress left (`2>&1 | head`): stop showing it, but the
            # apply goes on; the engine would count the error against the VM.
            self.view = NoHooks()


_current: InFlight | None = None


def track(view: Hooks) -> InFlight:
    """Wrap ``view``; what it sees is what an interrupt will report."""
    global _current
    _current = InFlight(view)
    return _current


def interrupted_message() -> str:
    """ "Interrupted." and, when an apply was under way, what it left in progress."""
    phases = _current.phases if _current is not None else {}
    if not phases:
        return "Interrupted."
    doing = ", ".join(
        f"{vm} was {phase.value.replace('-', ' ')}" for vm, phase in sorted(phases.items())
    )
    return f"Interrupted: {doing}; the next sand apply settles what was left (journal)."
