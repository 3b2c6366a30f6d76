"""How the Proxmox client says what went wrong with a request: one wording and one
:class:`ErrorKind` for each failure, whichever HTTP client met it (proxmoxer and
requests for writes, the standard library for reads), the token never in it."""

from __future__ import annotations

from typing import Any, NoReturn

from sand.backends.proxmox.errors import ErrorKind, ProxmoxError, classify_answer, shortened
from sand.backends.proxmox.token import ApiToken


class Failures:
    """Mixed into :class:`PveClient`, whose fields these read."""

    backend: str
    host: str
    port: int
    reached: bool
    _token: ApiToken | None

    def _scrub(self, text: str) -> str:
        if self._token is not None and self._token.secret:
            text = text.replace(self._token.secret, "***")
        return text

    def _fail(
        self,
        what: str,
        message: str,
        *,
        kind: ErrorKind,
        transient: bool,
        status: int | None = None,
    ) -> NoReturn:
        raise ProxmoxError(
            self.backend,
            self._scrub(f"{what}: {message}"),
            transient=transient,
            status=status,
            kind=kind,
        )

    def _refused(self, what: str, e: Any) -> NoReturn:
        """PVE answered 4xx/5xx (proxmoxer's ResourceException, or plainget's Refused)."""
        self.reached = True
        reason = str(e.content or "").strip()
        if e.errors:
            reason += f" {e.errors}"
        status = int(e.status_code)
        phrase = e.status_message or ""
        text = f"{status} {phrase}: {reason}" if phrase else f"{status}: {reason}"
        if status == 401:
            text += " (the API token was rejected: check token_file)"
        elif status == 403:
            text += " (the token lacks this privilege: run `sand doctor`)"
        kind, transient = classify_answer(status, reason)
        self._fail(what, text, kind=kind, transient=transient, status=status)

    def _untrusted(self, what: str, e: BaseException) -> NoReturn:
        self._fail(
            what,
            f"TLS verification failed for https://{self.host}:{self.port} ({shortened(e)}); "
            "set ca_file to the cluster's CA certificate",
            kind=ErrorKind.UNREACHABLE,
            transient=False,
        )

    def _nothing_listens(self, what: str) -> NoReturn:
        # Nothing listens there. Before PVE ever answered this run it is the address
        # that is wrong, and retrying it cost a plan 12 s for nothing; after, it is
        # pveproxy restarting, which passes.
        self._fail(
            what,
            f"connection refused by {self.host}:{self.port}: nothing listens there; check "
            "the backend's host and port (PVE's API listens on 8006) and that pveproxy "
            "runs",
            kind=ErrorKind.UNREACHABLE,
            transient=self.reached,
        )

    def _unreadable(self, what: str, e: BaseException) -> NoReturn:
        self._fail(
            what, f"unreadable answer: {shortened(e)}", kind=ErrorKind.UNREACHABLE, transient=True
        )

    def _cannot_connect(self, what: str, e: BaseException) -> NoReturn:
        self._fail(
            what,
            f"cannot connect to https://{self.host}:{self.port}: {shortened(e)}",
            kind=ErrorKind.UNREACHABLE,
            transient=False,
        )
