"""Which API method of PVE a request called: (method, path template), as pveproxy finds it."""

from __future__ import annotations

import re
import urllib.parse
from typing import Any

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


# PVE's IPSet handler is registered with ``fragmentDelimiter => ''`` (pve-firewall,
# src/PVE/API2/Firewall/IPSet.pm): RESTHandler::map_path_to_methods joins the rest of
# the path into its one ``{cidr}``, so an entry's '/' stays in it (``…/10.0.0.0/8``).
_IPSET_ENTRY = re.compile(r"^(.*/firewall/ipset/[^/]+/)(.+/.+)$")


def schema_match(path: str) -> Any:
    """The schema's match of ``path`` (a fakepve ``Match``: template, params, methods),
    with an IPSet entry's CIDR taken whole as PVE's router does; None: PVE has none."""
    path = canonical(path)
    entry = _IPSET_ENTRY.match(path)
    if entry is None:
        return pve_schema.load().match(path)
    match = pve_schema.load().match(entry.group(1) + entry.group(2).replace("/", "-"))
    if match is not None:
        match.params["cidr"] = entry.group(2)
    return match


def template_of(method: str, path: str) -> str | None:
    """The schema's path template of ``path`` (without ``/api2/json``), or None for a
    path or method PVE has not."""
    match = schema_match(path)
    if match is None or method not in match.methods:
        return None
    return str(match.template)
