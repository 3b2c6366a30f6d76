"""The manifest's models cost a first check no signature parsed from text: pydantic asks
each default factory's signature, and a builtin's (``list``, ``dict``) is read from its
text by tokenize's regular expressions, compiled for nothing else (~4 ms of CPU)."""

from __future__ import annotations

import inspect

from pydantic import BaseModel

from sand.manifest.schema import models


def test_every_default_factory_is_a_python_function_or_a_model():
    builtin = [
        f"{name}.{field}"
        for name, model in models().items()
        for field, info in model.model_fields.items()
        if info.default_factory is not None
        and not inspect.isfunction(info.default_factory)
        and not (
            isinstance(info.default_factory, type) and issubclass(info.default_factory, BaseModel)
        )
    ]
    assert builtin == []
