"""API reads over the standard library's HTTP client, not proxmoxer and requests.

A plan reads and never writes, and importing requests, urllib3 and proxmoxer cost a
``sand plan`` ~45 ms of its start (issue 27), a third of what a no-op plan of a
small fleet takes beyond the interpreter. Writes still go through proxmoxer
(``client.py``); a GET answers here exactly as proxmoxer answers it:

* TLS is checked as requests checks it: ``verify=False`` checks nothing; ``True``
  trusts ``$REQUESTS_CA_BUNDLE``, else ``$CURL_CA_BUNDLE``, else certifi's bundle; a
  path trusts that file (or directory) alone. The host name must match the
  certificate, and TLS 1.2 is the least accepted (urllib3 2's floor).
* A 2xx answer is its JSON's ``data`` (an unreadable body: ``{"errors": body}``);
  4xx/5xx raise :class:`Refused` carrying what proxmoxer's ResourceException does.
* Connections are kept, one per request in flight, and a kept one that the server
  has closed is not reused (urllib3's rule).

With a proxy named in the environment, requests would go through it: the client
then reads through proxmoxer too (:func:`serves`), so no proxy is bypassed.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import ssl
import threading
import urllib.parse
import zlib
from collections.abc import Mapping
from typing import Any


class Refused(Exception):
    """An HTTP status of 400 or above, as proxmoxer's ResourceException has it."""

    def __init__(self, status: int, phrase: str | None, reason: str, errors: Any) -> None:
        super().__init__(f"{status} {phrase}: {reason}")
        self.status_code = status
        self.status_message = phrase
        self.content = reason
        self.errors = errors


def serves() -> bool:
    """Whether a read may bypass requests: not when the environment names a proxy."""
    return not any(name.lower().endswith("_proxy") for name in os.environ)


def tls_context(verify: bool | str) -> ssl.SSLContext:
    """The TLS rules requests applies for ``verify`` (see the module's docstring)."""
    if verify is False:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        where = verify
        if verify is True:
            where = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE") or ""
            if not where:
                import certifi

                where = certifi.where()
        assert isinstance(where, str)
        if not os.path.exists(where):  # requests' own words for it
            raise OSError(
                f"Could not find a suitable TLS CA certificate bundle, invalid path: {where}"
            )
        if os.path.isdir(where):
            context = ssl.create_default_context(capath=where)
        else:
            context = ssl.create_default_context(cafile=where)
        context.hostname_checks_common_name = False
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


class PlainReader:
    """GETs of one PVE API, from any thread."""

    def __init__(self, host: str, port: int, verify: bool | str, timeout: float) -> None:
        self.host, self.port, self.timeout = host, port, timeout
        self._context = tls_context(verify)
        self._idle: list[http.client.HTTPSConnection] = []
        self._lock = threading.Lock()

    def get(self, path: str, params: Mapping[str, Any], authorization: str) -> Any:
        url = f"/api2/json/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        headers = {
            "Authorization": authorization,
            "Accept": "application/json",
            "Accept-Encoding": "gzip, deflate",
        }
        conn = self._connection()
        try:
            conn.request("GET", url, headers=headers)
            resp = conn.getresponse()
            body = _decoded(resp.read(), resp.getheader("Content-Encoding"))
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        if resp.status >= 400:
            raise Refused(resp.status, _phrase(resp.status), resp.reason, _errors(body))
        if 200 <= resp.status <= 299:
            try:
                return json.loads(body.decode("utf-8"))["data"]
            except (UnicodeDecodeError, ValueError):
                return {"errors": body}
        return None

    def _connection(self) -> http.client.HTTPSConnection:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if (conn.host, conn.port) == (self.host, self.port) and not _dropped(conn):
                    return conn
                conn.close()
        return http.client.HTTPSConnection(
            self.host, self.port, timeout=self.timeout, context=self._context
        )

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _dropped(conn: http.client.HTTPSConnection) -> bool:
    """A kept connection the server closed (or wrote to unasked) is readable."""
    if conn.sock is None:
        return True
    try:
        return bool(select.select([conn.sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


def _decoded(body: bytes, encoding: str | None) -> bytes:
    if encoding == "gzip":
        return zlib.decompress(body, 16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        try:
            return zlib.decompress(body)
        except zlib.error:
            return zlib.decompress(body, -zlib.MAX_WBITS)
    return body


def _phrase(status: int) -> str | None:
    # proxmoxer's names for them, PVE's 59x (AnyEvent's) included; its core module
    # is light (the weight is in its requests backend).
    from proxmoxer.core import ANYEVENT_HTTP_STATUS_CODES

    phrase: str | None = http.client.responses.get(status, ANYEVENT_HTTP_STATUS_CODES.get(status))
    return phrase


def _errors(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8")).get("errors")
    except (UnicodeDecodeError, ValueError, AttributeError):
        return {"errors": body}
