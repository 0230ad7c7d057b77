"""The speed choices the floors ask for, each decided by measuring on this machine: one module per
decision (linear, attention, sdpa, gelu, amp, adamw, decode), their shared buckets and inputs in `common`.

Each helper takes the shapes it is asked about and returns a choice name; the candidates are built
inside, from random inputs drawn from a private generator (planning never moves the global RNG,
so a run is reproducible whether its plan came from the cache or was measured). Shapes are keyed
by buckets (powers of two for rows, batch and a KV cache's length; finer steps for the sequence
lengths of a forward over many queries, see `_length_bucket`) so that a growing KV cache or a
short last batch does not trigger a measurement per size; each timed call is kept to about a GFLOP
by timing fewer rows (or batch items) than asked for, recorded as `measured_with`. `linear_kernel` and
`attention_kernel` are CPU questions (the floors ask them only on the CPU).
"""
from __future__ import annotations

# Imported in the order the decisions are listed (doctor, ANYFORMER_PLAN's help): linear first.
from .linear import LINEAR, linear_kernel  # noqa: I001
from .attention import ATTENTION, ATTENTION_LAYOUTS, attention_kernel
from .sdpa import SDPA, sdpa_backend, sdpa_context
from .gelu import GELU, gelu_kernel
from .amp import AMP, amp_dtype
from .adamw import ADAMW, adamw_impl
from .decode import DECODE, decode_kernel

__all__ = ["ADAMW", "AMP", "ATTENTION", "ATTENTION_LAYOUTS", "DECODE", "GELU", "LINEAR", "SDPA", "adamw_impl",
           "amp_dtype", "attention_kernel", "decode_kernel", "gelu_kernel", "linear_kernel", "sdpa_backend",
           "sdpa_context"]
