"""Paths and methods as pveproxy takes them, not fakepve 0.5.0's catch-all success.

Read in pve-http-server ``src/PVE/APIServer/AnyEvent.pm``, pve-manager
``PVE/HTTPServer.pm`` and pve-common ``src/PVE/RESTHandler.pm`` (the same on 8 and 9):

* ``process_header``: a method other than GET, POST, PUT and DELETE is answered
  ``501 method 'X' not available`` (no body) before anything else is looked at.
* ``PVE::RESTHandler::find_handler`` splits the path on ``/+`` and skips empty
  fragments: ``/nodes/pve1/qemu/100/`` and ``/nodes//pve1/qemu/100`` are the method of
  ``/nodes/pve1/qemu/100`` itself (a DELETE there destroys VM 100). fakepve's own routes
  took only the exact form and answered the others from its schema with a made-up task.
* ``PVE::HTTPServer::rest_handler``: a path no API method has, or a method the path
  has not, is ``501 Method '<METHOD> <path>' not implemented``, the path as sent after
  ``/api2/<format>`` (URI-unescaped), after the login was checked (a bad token: 401).
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.fakepve_rig.calls import canonical, relative, schema_match

KNOWN_METHODS = ("GET", "POST", "PUT", "DELETE")


class Paths:
    """Mixin of RigPve (before FakePve in the MRO)."""

    def _build_app(self) -> web.Application:
        app: web.Application = super()._build_app()  # type: ignore[misc]
        router = app.router
        resolve = router.resolve

        async def pve_resolve(request: web.Request) -> Any:
            raw = request.rel_url.raw_path
            path = canonical(raw)
            if path == raw:
                return await resolve(request)
            url = request.rel_url.with_path(path, encoded=True)
            return await resolve(request.clone(rel_url=url.with_query(request.rel_url.query)))

        router.resolve = pve_resolve  # type: ignore[method-assign]

        @web.middleware
        async def methods(request: web.Request, handler: Any) -> web.StreamResponse:
            if request.method not in KNOWN_METHODS:
                reason = f"method '{request.method}' not available"
                return web.Response(status=501, reason=reason)
            return await handler(request)  # type: ignore[no-any-return]

        @web.middleware
        async def known(request: web.Request, handler: Any) -> web.StreamResponse:
            # After fakepve's login check (appended: inside it), as rest_handler runs.
            rel = relative(request)
            if rel is None or self._pve_has(request, rel):
                return await handler(request)  # type: ignore[no-any-return]
            message = f"Method '{request.method} {rel}' not implemented"
            return web.json_response({"data": None, "message": message}, status=501, reason=message)

        app.middlewares.insert(0, methods)
        app.middlewares.append(known)
        return app

    @staticmethod
    def _pve_has(request: web.Request, rel: str) -> bool:
        """A method of PVE's API schema serves it: the schema's own, or one of fakepve's
        routes whose last parameter takes the rest of the path (a volume id, a nested
        pool), as PVE's fragmentDelimiter '' does."""
        match = schema_match(rel)
        if match is not None:
            return request.method in match.methods
        values = dict(request.match_info)
        return "tail" not in values and any("/" in str(v) for v in values.values())
