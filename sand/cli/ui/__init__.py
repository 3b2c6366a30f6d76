"""The board of ``sand ui`` (Textual, imported by this package only): the app and its
screens, the keys, the jobs it runs off the UI thread, the fleet it reads, the rows it
draws. The command itself, reading the manifest and running the board, is
``sand.cli.commands.ui``."""
