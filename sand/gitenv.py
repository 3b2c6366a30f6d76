"""The environment sand runs host-side git in, to talk to a remote it was told of.

No prompt ever waits on a terminal (a missing or refused credential fails instead),
no credential helper the user configured answers, and only the transports named in
``ALLOWED_PROTOCOLS`` are followed (no ``ext::``, which runs a command). An HTTPS
token is read from a 0600 file by ``CREDENTIAL_HELPER``, given to git in its
environment (``GIT_CONFIG_*``): never in argv, the URL, or a config file. Shared by
``sand sync``'s mirror (``sand.loops.gitmirror``) and the branch generator
(``sand.workitems.branches``).
"""

from __future__ import annotations

import os
from pathlib import Path

# Transports a repository URL may use (no ext::, which runs a command; no fd::).
ALLOWED_PROTOCOLS = "https:http:ssh:git:file"
# Answers git's "get" with the token in $SAND_GIT_TOKEN_FILE, and only for an https
# request (the second lock behind GIT_ALLOW_PROTOCOL=https); the request on stdin is
# drained first, and nothing but the file's path is ever an argument.
CREDENTIAL_HELPER = (
    '!f() { p=; while IFS= read -r l && [ -n "$l" ]; do '
    'case "$l" in protocol=*) p="${l#protocol=}";; esac; done; '
    '[ "$1" = get ] && [ "$p" = https ] || exit 0; '
    "printf 'username=x-access-token\\npassword='; "
    'tr -d "\\r\\n" < "$SAND_GIT_TOKEN_FILE"; echo; }; f'
)


def git_env(token_file: Path | None = None) -> dict[str, str]:
    """This process's environment for a git that talks to a remote."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("GIT_ASKPASS", "SSH_ASKPASS", "GIT_DIR", "GIT_WORK_TREE")
        and not k.startswith("GIT_CONFIG")
    }
    env.update(
        LC_ALL="C",
        GIT_TERMINAL_PROMPT="0",
        GCM_INTERACTIVE="never",
        GIT_ALLOW_PROTOCOL=ALLOWED_PROTOCOLS,
        GIT_CONFIG_COUNT="1",
        GIT_CONFIG_KEY_0="credential.helper",
        GIT_CONFIG_VALUE_0="",  # drop every helper the user's config names
    )
    if token_file is not None:
        env.update(
            # A token goes over HTTPS only: git follows no redirect to http://.
            GIT_ALLOW_PROTOCOL="https",
            GIT_CONFIG_COUNT="2",
            GIT_CONFIG_KEY_1="credential.helper",
            GIT_CONFIG_VALUE_1=CREDENTIAL_HELPER,
            SAND_GIT_TOKEN_FILE=str(token_file.resolve()),
        )
    return env
