"""What the board knows, apart from how it draws it."""

from __future__ import annotations

from dataclasses import dataclass, field

from sand.cli.ui.fleet import Snapshot
from sand.cli.ui.model import Activity, BoardRow
from sand.plan.model import Plan


@dataclass
class BoardState:
    """What the board knows: the last snapshot, the newest plan, live activity."""

    snapshot: Snapshot | None = None
    rows: list[BoardRow] = field(default_factory=list)
    plan: Plan | None = None  # the newest plan (a refresh's, or p's)
    plan_kind: str = "status"
    plan_taken: float = 0.0  # when p (or a watch) planned last: a newer refresh wins
    activity: dict[str, Activity] = field(default_factory=dict)
    landing: dict[str, str] = field(default_factory=dict)
    filter: str = ""
    error: str = ""
