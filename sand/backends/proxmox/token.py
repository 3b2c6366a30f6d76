"""The API token: read from ``token_file``, refused when others can read it.

The secret lives only in :class:`ApiToken` (whose repr hides it), in the HTTP
header proxmoxer builds, and in sand's log redaction set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sand.backends.proxmox.errors import ProxmoxError
from sand.logs import register_secret
from sand.state.private import private_file_problem

# user@realm!tokenid=secret, with realm and token id as pve-access-control checks them.
_TOKEN = re.compile(
    r"^(?:PVEAPIToken=)?(?P<user>[^\s@!=]+@[A-Za-z][A-Za-z0-9.\-_]+)"
    r"!(?P<tokenid>[A-Za-z][A-Za-z0-9.\-_]+)=(?P<secret>\S+)$"
)


@dataclass(frozen=True)
class ApiToken:
    user: str  # user@realm
    token_name: str
    secret: str = field(repr=False)

    @property
    def token_id(self) -> str:
        """user@realm!tokenid, as PVE names the token (in task owners and ACLs)."""
        return f"{self.user}!{self.token_name}"

    def __repr__(self) -> str:
        return f"ApiToken({self.token_id}, secret=***)"

    __str__ = __repr__


def read_token(path: Path, backend: str) -> ApiToken:
    """Read and check the token file; never puts the file's content in an error."""
    problem = private_file_problem(path)
    if problem:
        raise ProxmoxError(backend, f"token file {path} {problem}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        raise ProxmoxError(backend, f"token file {path} cannot be read as UTF-8 text") from None
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    found = _TOKEN.match(lines[0]) if len(lines) == 1 else None
    if found is None:
        raise ProxmoxError(
            backend,
            f"token file {path} must hold one line 'user@realm!tokenid=secret' "
            "(the secret PVE showed when the token was created)",
        )
    token = ApiToken(found["user"], found["tokenid"], found["secret"])
    register_secret(token.secret)
    return token
