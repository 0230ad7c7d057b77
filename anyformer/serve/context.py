"""What every section of the app shares: the run's model and settings, the limits, the worker."""
from __future__ import annotations

import dataclasses
from typing import Any

from .limits import ApiError, Limits
from .worker import ModelWorker

# Work estimated up to this runs in the light lane; more, in the heavy one, which takes turns with it. A light
# request waits behind the light work ahead of it, so this bounds what it can wait behind. At 0.25 s, a small char
# model's longest generation (1,000 tokens, estimated 0.19-0.29 s on a Zen 5) fell on either side from one start of
# the server to the next: in the light lane it tripled the light requests' median under load (17 to 53 ms) and no
# heavy share could help, since the turns never ran. At 0.1 s the soak's 700 tokens (0.185-0.203 s) are heavy by
# nearly twice that, and a one-picture, two-step sample of the MNIST generator (28 ms there) stays light on a
# processor at half that speed; at 0.05 s it would not.
LIGHT_SECONDS = 0.1


@dataclasses.dataclass
class Context:
    run_dir: str
    model: Any                 # an anyformer model, in eval mode
    meta: dict[str, Any]       # the run's config.json
    limits: Limits
    worker: ModelWorker
    # Seconds of one unit of work (a token, an image pass), measured by the section's warm-up on
    # this machine: what the cost budget (`limits.max_work_seconds`) is checked against.
    costs: dict[str, float] = dataclasses.field(default_factory=dict)
    # Helpers a section keeps beside the server (a decoding process): start() when the server starts,
    # close() when it stops.
    background: list[Any] = dataclasses.field(default_factory=list)

    def check_cost(self, seconds: float, what: str, fix: str) -> str:
        """The lane a request of `seconds` estimated compute runs in, or 422 naming the budget when it
        is over it. `what`: how the estimate was made; `fix`: what to ask instead."""
        if seconds > self.limits.max_work_seconds:
            raise ApiError(422, f"the request would take about {seconds:.1f} s of compute ({what}); the limit is "
                                f"{self.limits.max_work_seconds:g} s (--max-work-seconds): {fix}", reason="cost")
        return "light" if seconds <= LIGHT_SECONDS else "heavy"

    @property
    def data(self) -> dict[str, Any]:
        """The run's data section (classes, preprocessing, tokenizer)."""
        return self.meta.get("data", {})
