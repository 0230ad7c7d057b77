"""`anyformer serve`: a web page and a JSON API for a run (docs/serve.md)."""
from __future__ import annotations

import argparse

from ..runtime import core_count


def add_parser(sub: argparse._SubParsersAction) -> None:
    s = sub.add_parser("serve", help="a web page and a JSON API for a run (docs/serve.md)")
    s.add_argument("dir")
    s.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--token", help="the token clients must show (default: $ANYFORMER_SERVE_TOKEN, else one made "
                                   "at start where --host is not loopback; printed in the URL)")
    s.add_argument("--max-body-bytes", type=int, default=5 * 1024 * 1024, help="largest request body")
    s.add_argument("--max-pixels", type=int, default=40_000_000, help="largest image, width x height")
    s.add_argument("--max-prompt-chars", type=int, default=4000)
    s.add_argument("--max-new-tokens", type=int, default=1000, help="most tokens one generation may ask for")
    s.add_argument("--concurrency", type=int, default=2, help="light model calls running at once")
    s.add_argument("--queue", type=int, default=16, help="requests waiting per lane; past it, 503 + Retry-After")
    s.add_argument("--max-work-seconds", type=float, default=5.0,
                   help="a request's estimated compute (its steps x the step time measured at start)")
    s.add_argument("--deadline-seconds", type=float, default=30.0,
                   help="past it, 504 and the work stops; a request its lane would not finish by then "
                        "(by its own and the queued requests' estimated work, at the lane's recent pace) is refused at once, "
                        "503 + Retry-After")
    s.add_argument("--heavy-share", type=float,
                   help="the heavy lane's most share of a core while light requests wait or run, in (0, 1] "
                        "(default: 0.2 for an image classifier's large uploads, 0.25 for generation and sampling)")
    s.add_argument("--threads", type=int, help="CPU threads for torch in each model call (default: the cores over "
                                               "the calls that may run at once, --concurrency + 1, at least 1)")
    s.set_defaults(handler=serve, default_threads=default_threads)


def default_threads(args: argparse.Namespace) -> int:
    """Each model call's torch threads where --threads is not given: the cores shared among the calls that may run
    at once (the light lane's --concurrency and the heavy lane's one), so that together they ask for no more
    threads than there are cores. With every core in each call, on 2 cores (Intel Xeon, docs/results.md) a
    generator's server answered no heavy request in a soak's minute against 4 with one thread, and its light
    requests' p50 was 82 against 71 ms; a language model's answered 12 heavy requests against 19-20."""
    return max(1, core_count() // (args.concurrency + 1))


def serve(args: argparse.Namespace) -> int:
    try:
        from ..serve import Limits, serve as run_server
    except ImportError as e:
        raise ImportError(f"`anyformer serve` needs the serve extra ({e.name} is missing): "
                          f"pip install 'anyformer[serve]'") from None
    limits = Limits(max_body_bytes=args.max_body_bytes, max_pixels=args.max_pixels,
                    max_prompt_chars=args.max_prompt_chars, max_new_tokens=args.max_new_tokens,
                    concurrency=args.concurrency, queue=args.queue, max_work_seconds=args.max_work_seconds,
                    deadline_seconds=args.deadline_seconds, heavy_share=args.heavy_share)
    run_server(args.dir, host=args.host, port=args.port, limits=limits, token=args.token)
    return 0
