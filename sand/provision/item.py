"""The step that gives a generated VM its work item (``itemFile``, docs/generators.md).

The item's JSON (``sand.desired.generated``) travels on the step's stdin like every
value, never in its argv; ``item.sh`` writes it to ``~/.sand/item.json`` (0600) as
data. A VM with no item file runs no such step.
"""

from __future__ import annotations

from sand.desired.spec import DesiredVM
from sand.provision.steps import Step, fields, script


def item_steps(vm: DesiredVM) -> list[Step]:
    """The item step of ``vm``, or none."""
    if vm.generated is None or not vm.generated.text:
        return []
    return [Step("item", script("item.sh"), False, stdin=fields(("item", vm.generated.text)))]
