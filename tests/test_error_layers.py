"""Every error names its layer from one list (``sand.errors.ErrorLayer``), and a layer
reads as its word wherever it is shown: text, JSON, logs."""

from __future__ import annotations

import importlib
import json
import pkgutil

import sand
from sand.errors import ErrorLayer, SandError


def every_error_class() -> set[type[SandError]]:
    for info in pkgutil.walk_packages(sand.__path__, "sand."):
        if not info.name.endswith("__main__"):  # that one runs the command line
            importlib.import_module(info.name)
    found: set[type[SandError]] = set()
    todo: list[type[SandError]] = [SandError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo += cls.__subclasses__()
    return found


def test_every_error_names_a_layer_of_the_list() -> None:
    classes = every_error_class()
    assert len(classes) > 20
    free = sorted(c.__qualname__ for c in classes if not isinstance(c.layer, ErrorLayer))
    assert free == []


def test_a_layer_reads_as_its_word() -> None:
    assert f"failed [{ErrorLayer.SSH}]" == "failed [ssh]"
    assert json.dumps({"layer": ErrorLayer.PROXMOX}) == '{"layer": "proxmox"}'
    assert ErrorLayer.HOST == "host"
