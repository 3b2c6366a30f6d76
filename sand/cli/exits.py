"""sand's exit codes, in one place (CI gates read them).

0: success, or no changes. 1: an error, a refusal, a usage error (argparse's own 2
is overridden in ``sand.cli.flags``), a closed output pipe, a backend that could
not be observed or a VM left blocked. 2: changes pending (``--detailed-exitcode``
only). 130: interrupted (Ctrl-C), naming what was left in progress.
"""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2
EXIT_INTERRUPTED = 130
