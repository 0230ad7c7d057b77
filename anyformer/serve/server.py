"""`anyformer serve`: the app on uvicorn, bound to this machine only unless told otherwise."""
from __future__ import annotations

import logging

from .app import create_app
from .limits import Limits

log = logging.getLogger("anyformer.serve")


def serve(run_dir: str, host: str = "127.0.0.1", port: int = 8000, limits: Limits | None = None) -> None:
    import uvicorn
    app = create_app(run_dir, limits)
    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving on %s: anyone who can reach this address can use the model", host)
    print(f"serving {run_dir} at http://{host if ':' not in host else f'[{host}]'}:{port}/", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="info", timeout_graceful_shutdown=5)
