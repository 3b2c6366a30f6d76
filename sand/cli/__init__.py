"""Command-line interface: parses arguments, renders output, maps exit codes."""
