"""Completion for ``sand completion bash|zsh|fish`` (the script shtab makes from the parser,
in ``sand.cli.main``): which arguments complete what.

shtab is imported only when this command runs. VM names come from the manifest on
the command line being completed (``-f FILE``, else ./sand.yaml) through the hidden
``sand __complete-vms WORDS...``: the manifest is read as ``sand validate`` reads it,
no backend is contacted, and nothing is printed when it cannot be read.
"""

from __future__ import annotations

import argparse

# Functions the bash and zsh completers below call, given words typed so far (so the
# helper finds the same -f the command will use); shtab puts them in the script's
# preamble. cp's SRC and DST: a host path, or VM:PATH with the VM part completed from
# the manifest as "VM:" (the path in the guest is typed: completing it would mean SSH).
_BASH = """\
_sand_vm_names() {
  compgen -W "$(sand __complete-vms "${COMP_WORDS[@]}" 2>/dev/null)" -- "$1"
}
_sand_vm_paths() {
  compgen -f -- "$1"
  compgen -W "$(sand __complete-vms "${COMP_WORDS[@]}" 2>/dev/null | sed 's/.*/&:/')" -- "$1"
}
"""
_ZSH = """\
_sand_vm_names() {
  local -a vms
  vms=(${(f)"$(sand __complete-vms ${words[@]} 2>/dev/null)"})
  compadd -a vms
}
_sand_vm_paths() {
  _files
  local -a vms
  vms=(${(f)"$(sand __complete-vms ${words[@]} 2>/dev/null)"})
  compadd -S : -a vms
}
"""
_VMS_FISH = "(sand __complete-vms (commandline -opc) 2>/dev/null)"
# A file name (a manifest, a token file): the shell's own file completion, as shtab
# names it for each shell (shtab.FILE, spelled here so that building the parser does
# not import shtab). Without it such an argument completed to nothing at all.
_FILES_FISH = "(__fish_complete_path (commandline -ct))"
FILES = {"bash": "_shtab_compgen_files", "zsh": "_files", "fish": _FILES_FISH}
# shtab's per-shell completer for an argument (its ``action.complete``).
VM_NAMES = {
    "bash": "_sand_vm_names",
    "zsh": "_sand_vm_names",
    "fish": _VMS_FISH,
    "preamble": {"bash": _BASH, "zsh": _ZSH},
}
VM_PATHS = {
    "bash": "_sand_vm_paths",
    "zsh": "_sand_vm_paths",
    # No `$` in it: fish expands the string, quoted "...", in the script shtab writes.
    "fish": f"{_FILES_FISH} ({_VMS_FISH[1:-1]} | sed 's/.*/&:/')",
}


def complete_files(*actions: argparse.Action) -> None:
    """Have these arguments complete file names in every shell."""
    for action in actions:
        action.complete = FILES  # type: ignore[attr-defined]  # read by shtab


_MANIFEST_FLAGS = ("-f", "--file", "--manifest")


def manifest_in(words: list[str]) -> str:
    """The manifest a command line names with -f/--file/--manifest (else ./sand.yaml)."""
    found = "sand.yaml"
    for i, word in enumerate(words):
        if word in _MANIFEST_FLAGS and i + 1 < len(words):
            found = words[i + 1]
        elif word.startswith(("--file=", "--manifest=")):
            found = word.split("=", 1)[1]
    return found


def print_vm_names(words: list[str]) -> int:
    """The manifest's VM names, one a line; ``words`` is the command line so far
    (the program's name first). Always exits 0: completion must never print errors
    into the prompt."""
    # here, not at the top: importing it loads pydantic and yaml
    from sand.manifest import load_manifest

    try:
        manifest = load_manifest(manifest_in(words[1:])).manifest
    except Exception:  # any manifest that cannot be read completes to nothing
        return 0
    for vm in manifest.vms:
        print(vm.name)
    return 0
