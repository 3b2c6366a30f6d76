"""Each command's handler, one module a command (``sand/cli/commands/<command>.py``),
with ``run(args) -> int``: loaded by ``sand.cli.main`` by the command's name once its
flags are parsed, and importing what the command needs at its top. The flags are in
``sand.cli.arguments``; what several commands share lives beside this package
(``applying``, ``guests``, ``watch``, ``progress`` ...)."""
