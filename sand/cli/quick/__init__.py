"""Answers a command can give before its handler loads (``sand.cli.main`` asks first):
each module's ``answer(args)`` returns the exit code, or None to run the handler.

- ``validate``: manifests found valid unchanged since (``sand.state.validated``),
  answered without loading the models that check them.
"""
