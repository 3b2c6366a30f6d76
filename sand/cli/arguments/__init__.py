"""Each command's flags, one module a command (``sand/cli/arguments/<command>.py``).

Always loaded for ``--help`` and shell completion, so each imports argparse and sand's
flag helpers only, never its handler: that is ``sand/cli/commands/<command>.py``, which
the dispatch in ``sand.cli.main`` loads by the command's name."""
