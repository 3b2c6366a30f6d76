"""Which API method of PVE a request called: (method, path template), as pveproxy finds it."""

from __future__ import annotations

import urllib.parse

from aiohttp import web
from fakepve import schema as pve_schema

FORMATS = ("/api2/json", "/api2/extjs")


def canonical(raw_path: str) -> str:
    """The path with the empty fragments PVE::RESTHandler::find_handler skips left out."""
    return "/" + "/".join(seg for seg in raw_path.split("/") if seg)


def relative(request: web.Request) -> str | None:
    """The path after ``/api2/<format>``, URI-unescaped, as pveproxy's split_abs_uri
    reads it; None outside the API."""
    path = urllib.parse.unquote(request.rel_url.raw_path)
    for prefix in FORMATS:
        if path == prefix or path.startswith(prefix + "/"):
            return path[len(prefix) :] or "/"
    return None


def template_of(method: str, path: str) -> str | None:
    """The schema's path template of ``path`` (without ``/api2/json``), or None for a
    path or method PVE has not."""
    match = pve_schema.load().match(canonical(path))
    if match is None or method not in match.methods:
        return None
    return str(match.template)
