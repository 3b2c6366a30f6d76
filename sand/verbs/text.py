"""Making guest-supplied text safe to print on the host's terminal.

A guest controls branch names, paths, commit messages and file contents. Any
of them can carry terminal escapes (rewrite the screen, set the window title,
hide a line), bidi overrides (make ``rm`` read as ``mr``) or newlines (forge a
second table row). The verbs use sand's one sanitiser, :mod:`sand.terminal`:
:func:`one_line` for cells and messages; :func:`visible` keeps the line
structure of a block of text but shows every other control character as an
escape, so a reviewer *sees* that something was there instead of having it
silently dropped.
"""

from __future__ import annotations

from sand.terminal import decode, inert, one_line, visible

__all__ = ["decode", "inert", "one_line", "visible"]
