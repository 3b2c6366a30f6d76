"""Plan layer: pure diff of desired against observed, and its renderers."""

from sand.plan.model import Action, FieldChange, Plan, VMChange
from sand.plan.planner import make_plan

__all__ = ["Action", "FieldChange", "Plan", "VMChange", "make_plan"]
