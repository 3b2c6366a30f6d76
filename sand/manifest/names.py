"""Identifier rules shared by the manifest's fields (project ids, variable names)."""

from __future__ import annotations

import re

IDENTIFIER = re.compile(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
