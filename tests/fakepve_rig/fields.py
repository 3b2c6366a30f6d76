"""Fields PVE leaves out of an answer the token may read but not wholly audit.

Done in the methods' code, not in their ``permissions`` (those are ``user => 'all'``), so
fakepve 0.5.0, which sends every field to everyone, misses them (read in pve-manager
``PVE/API2/Cluster.pm`` and ``PVE/API2/Nodes.pm``, the same since PVE 7.0, so both
profiles):

* ``GET /cluster/resources`` (``PVE::API2::Cluster``, method ``resources``): a guest's
  ``pool`` only with ``Pool.Audit`` on ``/pool/<pool>``; a row per pool (``type``
  unset or ``pool``) only with ``Pool.Audit`` on it; a node's usage fields only with
  ``Sys.Audit`` on ``/nodes/<node>`` (``PVE::API2Tools::extract_node_stats``).
* ``GET /nodes`` (``PVE::API2::Nodes``, method ``index``): the same usage fields under
  the same rule.
* ``GET /nodes/{node}/network`` (``PVE::API2::Network``, method ``index``): a bridge only
  with ``SDN.Audit`` or ``SDN.Use`` on ``/sdn/zones/localnetwork/<bridge>``
  (``check_sdn_bridge``; a grant on one of its VLANs only is not modelled).
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

NETWORK = "/nodes/{node}/network"
# What extract_node_stats leaves out when its $exclude_stats is set.
NODE_STATS = ("uptime", "cpu", "mem", "disk", "maxcpu", "maxmem", "maxdisk")


class Fields:
    """Mixin of RigPve (before FakePve in the MRO)."""

    def _fid_user(self, request: web.Request) -> str | None:
        from fakepve.server import USER

        return request.get(USER)  # type: ignore[no-any-return]

    def _audits(self, user: str | None, path: str, priv: str) -> bool:
        return user is None or bool(self.allowed(user, path, priv))  # type: ignore[attr-defined]

    def _node_row(self, user: str | None, row: dict[str, Any]) -> dict[str, Any]:
        if self._audits(user, f"/nodes/{row.get('node')}", "Sys.Audit"):
            return row
        return {k: v for k, v in row.items() if k not in NODE_STATS}

    async def _resources(self, request: web.Request) -> web.StreamResponse:
        """pve-manager PVE::API2::Cluster ``resources``."""
        response: web.Response = await super()._resources(request)  # type: ignore[misc]
        user = self._fid_user(request)
        kind = request.query.get("type")
        rows: list[dict[str, Any]] = []
        if kind in (None, "pool"):
            rows += [
                {"id": f"/pool/{name}", "pool": name, "type": "pool"}
                for name in sorted(self.pools)  # type: ignore[attr-defined]
                if self._audits(user, f"/pool/{name}", "Pool.Audit")
            ]
        for row in json.loads(bytes(response.body))["data"]:  # type: ignore[arg-type]
            if row.get("type") in ("qemu", "lxc") and row.get("pool") is not None:
                if not self._audits(user, f"/pool/{row['pool']}", "Pool.Audit"):
                    row = {k: v for k, v in row.items() if k != "pool"}
            elif row.get("type") == "node":
                row = self._node_row(user, row)
            rows.append(row)
        return web.json_response({"data": rows})

    async def _nodes(self, request: web.Request) -> web.StreamResponse:
        """pve-manager PVE::API2::Nodes ``index``: extract_node_stats per node."""
        response: web.Response = await super()._nodes(request)  # type: ignore[misc]
        user = self._fid_user(request)
        rows = json.loads(bytes(response.body))["data"]  # type: ignore[arg-type]
        return web.json_response({"data": [self._node_row(user, r) for r in rows]})

    async def synthesise(
        self, match: Any, method: str, info: Any, user: str | None, values: Any
    ) -> Any:
        data = await super().synthesise(match, method, info, user, values)  # type: ignore[misc]
        if match.template != NETWORK or method != "GET" or user is None:
            return data
        return [
            iface
            for iface in data
            if iface.get("type") not in ("bridge", "OVSBridge")
            or any(
                self._audits(user, f"/sdn/zones/localnetwork/{iface.get('iface')}", priv)
                for priv in ("SDN.Audit", "SDN.Use")
            )
        ]
