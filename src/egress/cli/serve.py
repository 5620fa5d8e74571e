"""``egress serve``: the HTTP API with uvicorn, plus an embedded worker by default.

uvicorn's own access log is off: it prints raw paths, and the path of a signed download
link is a credential. The app logs each request by its route template instead.
"""

from __future__ import annotations

import click

from egress.cli.jobs import home_option, open_store


@click.command()
@home_option
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface).")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--no-worker", is_flag=True,
              help="API only: run workers elsewhere ('egress worker').")
@click.option("--log-level", default="INFO", show_default=True)
def serve(home: str | None, host: str, port: int, no_worker: bool, log_level: str) -> None:
    """Serve the HTTP API (/v1, OpenAPI at /openapi.json) and run an embedded worker."""
    import gc

    import uvicorn

    from egress.api.server import Server
    from egress.config import load_settings
    from egress.logs import setup_logging
    from egress.web import create_site

    setup_logging(log_level)
    settings = load_settings(home)
    store = open_store(settings)
    try:
        app = create_site(settings, store, run_worker=not no_worker)
        # log_config=None: keep the handlers set up above (one line per event)
        config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False,
                                log_level=log_level.lower(), proxy_headers=True)
        # Everything loaded so far lives as long as the process: keep it out of the
        # collector's full passes, which otherwise walk it on every gen-2 collection
        # (a pause that shows in the API's tail latency).
        gc.collect()
        gc.freeze()
        Server(config).run()  # ends live-event streams first when it stops
    finally:
        store.close()
