"""A VM that is no fork costs nothing for the forks rule: resolving what it inherits
reads no other entry. Each of the 1,000 VMs of a fleet indexed all the others, so
``sand plan`` grew with the square of the fleet (6 s at 5,000 VMs, 1 s of it here)."""

from __future__ import annotations

from typing import Any

from sand.desired.fork import with_inherited
from sand.manifest import parse_manifest
from sand.manifest.forks import inherited
from tests.plan.helpers import MANIFEST


class Unread(list[Any]):
    """The other entries, which must not be read."""

    def __iter__(self) -> Any:
        raise AssertionError("the other entries were read for a VM that is no fork")


def test_a_raw_entry_that_is_no_fork_is_taken_as_it_is() -> None:
    entry = {"name": "a", "memory": "4GiB"}
    assert inherited(entry, Unread()) == entry


def test_a_model_that_is_no_fork_is_taken_as_it_is() -> None:
    vm = parse_manifest(MANIFEST).vms[0]
    assert vm.fork is None
    assert with_inherited(vm, Unread()) is vm


def test_a_fork_still_reads_its_source() -> None:
    source = {"name": "a", "memory": "12GiB", "protect": True}
    fork = {"name": "b", "from": {"vm": "a"}}
    assert inherited(fork, [source, fork]) == {**fork, "memory": "12GiB"}
