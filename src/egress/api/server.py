"""The uvicorn server of ``egress serve``: live-event streams end first when it stops.

uvicorn stops in this order: close the listening sockets, wait until every open
response has finished (forever, unless ``timeout_graceful_shutdown``), then run the
app's lifespan shutdown. A server-sent-events stream never finishes by itself, so one
open ``/events`` stream would hold a SIGTERM'd server until its client goes away, and
the lifespan's ``stop_hub`` would come too late. This server ends the streams before
that wait; their clients reconnect (``retry``) to a server that stays.
"""

from __future__ import annotations

import socket

import uvicorn
from starlette.applications import Starlette

from egress.api.events import stop_hub


class Server(uvicorn.Server):
    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        if isinstance(app, Starlette):
            await stop_hub(app)
        await super().shutdown(sockets=sockets)
