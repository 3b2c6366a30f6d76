"""Plan layer: pure diff of desired against observed, and its renderers."""

from sand.plan.model import (
    Action,
    BaseAction,
    BaseChange,
    Blocker,
    FieldChange,
    GuestAction,
    Plan,
    Strategy,
    VMChange,
)
from sand.plan.planner import make_plan

__all__ = [
    "Action",
    "BaseAction",
    "BaseChange",
    "Blocker",
    "FieldChange",
    "GuestAction",
    "Plan",
    "Strategy",
    "VMChange",
    "make_plan",
]
