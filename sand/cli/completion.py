"""``sand completion bash|zsh|fish``: a completion script made from the parser by shtab.

shtab is imported only when this command runs. VM names come from the manifest on
the command line being completed (``-f FILE``, else ./sand.yaml) through the hidden
``sand __complete-vms WORDS...``: the manifest is read as ``sand validate`` reads it,
no backend is contacted, and nothing is printed when it cannot be read.
"""

from __future__ import annotations

import argparse
import sys

# shtab's per-shell completer for a VM positional (``action.complete``): bash and zsh
# call a function from the preamble, fish runs a command; each passes the words typed
# so far, so the helper finds the same -f the command will use.
VM_NAMES = {
    "bash": "_sand_vm_names",
    "zsh": "_sand_vm_names",
    "fish": "(sand __complete-vms (commandline -opc) 2>/dev/null)",
    "preamble": {
        "bash": (
            "_sand_vm_names() {\n"
            '  compgen -W "$(sand __complete-vms "${COMP_WORDS[@]}" 2>/dev/null)" -- "$1"\n'
            "}\n"
        ),
        "zsh": (
            "_sand_vm_names() {\n"
            "  local -a vms\n"
            '  vms=(${(f)"$(sand __complete-vms ${words[@]} 2>/dev/null)"})\n'
            "  compadd -a vms\n"
            "}\n"
        ),
    },
}

# cp's SRC and DST: a host path (the shell's file completion) or VM:PATH, the VM part
# completed from the manifest as "VM:". Filled in with item 4 of the completion work.
VM_PATHS = VM_NAMES

_MANIFEST_FLAGS = ("-f", "--file", "--manifest")


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    from sand.cli.main import build_parser

    sys.stdout.write(shtab.complete(build_parser(), shell=args.shell))
    return 0


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
    from sand.manifest import load_manifest

    try:
        manifest = load_manifest(manifest_in(words[1:])).manifest
    except Exception:  # any manifest that cannot be read completes to nothing
        return 0
    for vm in manifest.vms:
        print(vm.name)
    return 0
