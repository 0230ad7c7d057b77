"""Floor 5 (beside the command line): a web page and a JSON API for one run (`anyformer serve`).

Built on Starlette served by uvicorn. Why these: Starlette is the small, well-kept ASGI toolkit
under FastAPI (routing, streaming responses, multipart forms, a TestClient) without FastAPI's
pydantic layer, which this app does not need: its few JSON fields are checked by hand with
messages in the house style. uvicorn is the reference ASGI server, maintained by the same
people, pure Python with no build step. Being ASGI, a streamed generation holds no thread while
it waits, and model work is sent to a bounded thread pool (`worker.py`) so no request stalls the
event loop.

The page and API depend on the run's model family; each family is one section module
(`classify` for ViTs, `generate` for GPTs, `sample` for generators), chosen in `sections.py`.
"""
from .app import create_app
from .limits import ApiError, Limits
from .server import serve

__all__ = ["ApiError", "Limits", "create_app", "serve"]
