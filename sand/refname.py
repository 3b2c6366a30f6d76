"""Branch names, checked with git's own rules before any use.

A guest picks its branch names, so a name is data that must be proven inert
before it goes into a ``gh`` argv, a URL or the ledger: ``x;rm -rf ~`` is
harmless in an argv, but ``--repo=evil/x`` is an option to most CLIs, and an
ANSI escape or a newline would rewrite the table a person reads. The rules
are ``git check-ref-format --branch`` (see git-check-ref-format(1)); on top of
them a name must be printable (no bidi overrides or other invisible
characters, which git allows) and at most 255 characters.

The same rule checks a manifest repo's ``branch`` at validate time, so it sits
below both ``sand.manifest`` and ``sand.verbs`` (neither imports the other).
"""

from __future__ import annotations

MAX_BRANCH = 255
_FORBIDDEN = frozenset(" ~^:?*[\\")


def branch_problem(name: str) -> str | None:
    """Why ``name`` is not a branch name sand will use, or None when it is."""
    if not name:
        return "empty"
    if len(name) > MAX_BRANCH:
        return f"longer than {MAX_BRANCH} characters"
    if not name.isprintable():
        return "contains a control or invisible character"
    if any(ch in _FORBIDDEN for ch in name):
        return "contains one of space ~ ^ : ? * [ \\"
    if name.startswith("-"):
        return "starts with '-' (it would read as an option)"
    if name == "@" or "@{" in name:
        return "is '@' or contains '@{'"
    if name == "HEAD":
        return "is HEAD"
    if ".." in name:
        return "contains '..'"
    if name.startswith("/") or name.endswith("/") or "//" in name:
        return "has an empty path component"
    if name.endswith("."):
        return "ends with '.'"
    for part in name.split("/"):
        if part.startswith("."):
            return "has a component starting with '.'"
        if part.endswith(".lock"):
            return "has a component ending with '.lock'"
    return None


def valid_branch(name: str) -> bool:
    return branch_problem(name) is None


def is_object_id(text: str) -> bool:
    """A full git object id (SHA-1 or SHA-256), lower-case hex as git prints it."""
    return len(text) in (40, 64) and all(c in "0123456789abcdef" for c in text)
