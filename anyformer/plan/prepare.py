"""The one door through which the plan's answers reach a model: `prepare(model, example)`.

    model = plan.prepare(model, images)                    # runs images through it once, then chooses
    model = plan.prepare(gpt, lambda m: m.generate(prompt, 8))   # any call: what it runs is planned for

Before a model runs, `prepare` swaps its plain layers for the plan's (`layers.py`: the same
parameters and state dict), runs `example` through it once to see each layer's shapes, asks the
planner once per layer and shape, for calls with and without gradients, and leaves the answers on
the layers: a kernel name, an attention function (and for self-attention `attend_packed`). No
forward asks the planner afterwards. Whether a GPT's one-token generation steps run compiled is the
door's decoding half, `prepare_decode` (`decode.py`), asked for the batch and length a caller will
generate, before it generates. The example runs under a forked RNG with gradients as the model's
mode says (training: on), and its outputs are dropped. `unprepare(model)` puts the plain layers back.

Choices are made for the example's shapes; a call of another shape runs on the same choice (each
is correct for any shape: only the speed was measured for these). Forcing (`ANYFORMER_PLAN`,
`plan.forcing`) and a run's recorded plan (`Planner.recording`) apply as they do to every decision.
"""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, TypeVar

import torch
from torch import Tensor, nn

from ..nn import MultiHeadAttention
from ..nn.attend import ATTENTION_FUNCTIONS, sdpa
from .decisions import attention_kernel, gelu_kernel, linear_kernel, sdpa_backend
from .layers import (ROWWISE_MAX_ROWS, PLANNED, STOCK, NativePacked, PlannedGELU, native_gelu_may_run,
                     needs_grad, plain_eager, plain_fp32_cpu, swap)
from .attention_choice import AttentionChoice, SdpaBackend
from .decode import forget

M = TypeVar("M", bound=nn.Module)
Example = Callable[[nn.Module], Any] | Tensor | tuple | Mapping[str, Any] | str | None

__all__ = ["prepare", "unprepare", "unprepared"]


@dataclass(frozen=True)
class AttentionCase:
    """What one attention call looked like: the planner's key for it."""

    batch: int
    heads: int
    q_len: int
    k_len: int
    head_dim: int
    dtype: torch.dtype
    causal: bool
    masked: bool
    layout: str        # packed | views | cache (plan/decisions/attention.py)
    device: str
    dropout: bool      # attention dropout in training: SDPA's backends draw their own masks


def prepare(model: M, example: Example = None) -> M:
    """`model` with the plan's layers swapped in and its choices made for what `example` runs: a
    callable `example(model)`, input tensors (`model(*example)`), keyword inputs (`model(**example)`),
    "default" (one input of the model's kind: `default_example`), or None (the plan's layers on the
    stock kernels, nothing measured). Returns `model` (prepared in place), to run eagerly; the trainer
    and `prepare_decode` compile where the plan measured that faster. A GPT's compiled decode steps
    from before are dropped: they were traced through the layers' earlier choices."""
    swap(model, PLANNED)
    _reset(model)
    forget(model)
    if isinstance(example, str):
        if example != "default":
            raise ValueError(f"prepare: example must be inputs, a callable, 'default' or None; got {example!r}")
        example = default_example(model)
    calls = {} if example is None else _observe(model, example)
    for m, seen in calls.items():
        _choose(m, seen)
    return model


def unprepare(model: M) -> M:
    """The plain layers back, in place (the parameters untouched); the compiled decode steps dropped."""
    swap(model, STOCK)
    for m in _attention_layers(model):
        _default_attention(m)
    forget(model)
    return model


@contextlib.contextmanager
def unprepared(model: M) -> Iterator[M]:
    """Inside: `model`'s plain layers, on their default attention functions (what an exporter
    translates into standard operators); after: as prepared, with the plan's choices."""
    swapped = swap(model, STOCK)
    attends = {m: (m.attend, m.attend_packed) for m in _attention_layers(model)}
    for m in attends:
        _default_attention(m)
    try:
        yield model
    finally:
        for m in swapped:
            m.__class__ = PLANNED[type(m)]
        for m, (attend, attend_packed) in attends.items():
            m.attend, m.attend_packed = attend, attend_packed


def _attention_layers(model: nn.Module) -> list[MultiHeadAttention]:
    """The attention layers the plan chooses for: MultiHeadAttention itself (a subclass may have a
    forward of its own, which the plan's answers would not fit), as `swap` takes exact types."""
    return [m for m in model.modules() if type(m) is MultiHeadAttention]


def _default_attention(m: MultiHeadAttention) -> None:
    """The layer's own attention function (its `impl`'s), and nothing that takes its projection whole."""
    m.attend = ATTENTION_FUNCTIONS["explicit"] if m.impl == "explicit" else sdpa
    m.attend_packed = None


def _reset(model: nn.Module) -> None:
    """Every planned layer on the stock choices (its class's defaults, the default attention function):
    a model prepared again is observed, and chosen for, as if it were new."""
    for m in model.modules():
        if type(m) in STOCK:
            # A choice set on the layer hides its class's default (the class's own or a planned base's).
            defaults = {k for c in type(m).__mro__ if c.__module__ == type(m).__module__ for k in vars(c)}
            for name in defaults & m.__dict__.keys():
                del m.__dict__[name]
    for m in _attention_layers(model):
        _default_attention(m)


def default_example(model: nn.Module) -> Callable[[nn.Module], Any] | None:
    """One input of `model`'s kind, as a server or a command gets one: an image for a ViT; for a GPT a
    prompt of half its context (at most 256 tokens), scored whole (`anyformer eval`'s pass) and
    continued by two tokens (generation's prompt pass with its cache, and a one-token step); a short
    sentence for a text encoder; None for another model (nothing measured)."""
    family, c = getattr(model, "family", None), getattr(model, "config", None)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    if family == "vit":
        h, w = (c.image_size, c.image_size) if isinstance(c.image_size, int) else tuple(c.image_size)
        return lambda m: m(torch.zeros(1, c.in_chans, h, w, device=device))
    if family == "gpt":
        prompt = torch.zeros(1, max(1, min(256, c.context // 2)), dtype=torch.long, device=device)
        return lambda m: (m(prompt), m.generate(prompt, 2, temperature=0))
    if family == "text-encoder":
        return lambda m: m(torch.zeros(1, min(8, c.max_positions), dtype=torch.long, device=device))
    return None


def _run(model: nn.Module, example: Example) -> None:
    if callable(example) and not isinstance(example, Tensor):
        example(model)
    elif isinstance(example, Mapping):
        model(**example)
    else:
        model(*(example if isinstance(example, tuple) else (example,)))


def _observe(model: nn.Module, example: Example) -> dict[nn.Module, list[tuple[Any, bool]]]:
    """Run `example` once with a pre-hook on every planned layer: each layer's calls, as (what the
    planner is asked about, whether the call needs gradients)."""
    seen: dict[nn.Module, list[tuple[Any, bool]]] = {}

    def hook(m: nn.Module, args: tuple, kwargs: dict) -> None:
        x = args[0]
        if isinstance(m, MultiHeadAttention):
            # Called as the layer was (its context positional or by name); a training call where its
            # queries want a gradient, as the layer's attention function tells one (`AttentionChoice`).
            queries = m.q if m.cross else m.qkv
            seen.setdefault(m, []).append((_attention_case(m, *args, **kwargs), needs_grad(x, *queries.parameters())))
        elif _has_choice(m, x):  # only calls that would run on another kernel are asked about
            seen.setdefault(m, []).append((tuple(x.shape), needs_grad(x, getattr(m, "weight", None))))

    planned = [m for m in model.modules() if type(m) in STOCK] + _attention_layers(model)
    handles = [m.register_forward_pre_hook(hook, with_kwargs=True) for m in planned]
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    try:
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), \
                (contextlib.nullcontext() if model.training else torch.no_grad()):
            _run(model, example)
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)
    return seen


def _has_choice(m: nn.Module, x: Tensor) -> bool:
    """Whether a linear layer's or a GELU's call could run on another kernel than PyTorch's: plain
    fp32 on the CPU, outside autocast and tracers (what `layers.linear` and `PlannedGELU` check)."""
    return native_gelu_may_run(x) if isinstance(m, PlannedGELU) else plain_fp32_cpu(x, m.weight)


def _attention_case(m: MultiHeadAttention, x: Tensor, context: Tensor | None = None, *, causal: bool = False,
                    mask: Tensor | None = None, cache: Any = None, queries: int | None = None,
                    **_: Any) -> AttentionCase:
    b, n = x.shape[0], x.shape[1]
    # A cache is read whole, the positions not yet written masked (and no causal mask besides).
    nk = context.shape[1] if m.cross else n if cache is None else cache.max_len
    nq = n if queries is None else min(queries, n)
    dropout = m.training and m.attn_dropout > 0
    # Under autocast q, k and v come out of the projection in its precision; the native kernel takes them
    # whole in bf16 too (computed in fp32, `native.takes_packed`), so autocast leaves the layout packed.
    device = x.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
    whole = (not m.cross and m.rotary is None and cache is None and queries is None and mask is None
             and not m.locality and not dropout and plain_eager(x, autocast_ok=True))
    layout = "cache" if cache is not None else "packed" if whole else "views"
    # A locality layer masks its own diagonal (nn/attention.py): a masked call whatever the caller gave.
    return AttentionCase(b, m.heads, nq, nk, m.head_dim, dtype, bool(causal) and cache is None,
                         mask is not None or cache is not None or m.locality, layout, device, dropout)


def _sizes(shape: tuple[int, ...]) -> tuple[int, int]:
    """(rows, elements) of an input of `shape`: every dim but the last multiplied, and all of them."""
    return math.prod(shape[:-1]), math.prod(shape)


def _choose(m: nn.Module, seen: list[tuple[Any, bool]]) -> None:
    """Ask the planner for `m`'s calls: for a linear layer or a GELU, per kind of call (without
    gradients, a few rows, as a generation step's, or more; with gradients, one kernel whatever the
    rows), the first of each kind seen; the calls without gradients also at the shapes seen with
    them (a trainer's evaluation)."""
    if isinstance(m, MultiHeadAttention):
        if m.impl == "auto":
            _choose_attention(m, seen)
        return
    w = getattr(m, "weight", None)  # the calls seen are plain fp32 CPU ones only (`_has_choice`)
    kinds: dict[tuple[bool, bool], tuple[int, ...]] = {}
    for shape, grads in seen:
        rows, numel = _sizes(shape)
        if numel > 0:
            few = rows <= ROWWISE_MAX_ROWS
            kinds.setdefault((grads, few and not grads), shape)  # a layer has one training kernel
            kinds.setdefault((False, few), shape)
    for (grads, few), shape in kinds.items():
        rows, numel = _sizes(shape)
        if isinstance(m, PlannedGELU):
            native = gelu_kernel(numel, m.approximate, grads) == "native"
            setattr(m, "native_training" if grads else "native_few" if few else "native", native)
            continue
        kernel = linear_kernel(rows, w.shape[1], w.shape[0], w.dtype, grads)
        if grads:
            m.train_with(kernel, planned=True)
        else:
            setattr(m, "few_rows_kernel" if few else "kernel", kernel)
    # A kind of call never seen without gradients runs as the kind that was (each is right for any shape).
    few, many = ("native_few", "native") if isinstance(m, PlannedGELU) else ("few_rows_kernel", "kernel")
    if (False, True) not in kinds and (False, False) in kinds:
        setattr(m, few, getattr(m, many))
    elif (False, False) not in kinds and (False, True) in kinds:
        setattr(m, many, getattr(m, few))


def _choose_attention(m: MultiHeadAttention, seen: list[tuple[Any, bool]]) -> None:
    """The layer's attention function per kind of call (with or without gradients; one query or
    many), and whether its packed projection goes to the native kernel whole (`attend_packed`), for
    calls without gradients, training calls or both."""
    table: dict[tuple[bool, bool], Callable[..., Tensor]] = {}
    whole = {False: False, True: False}  # per kind of call (gradients or not): the native kernel chosen
    for case, training in seen:
        for grads in ((False, True) if training else (False,)):  # a training call's shapes serve an evaluation too
            key = (grads, case.q_len == 1)
            if key in table:
                continue
            choice = _attention_choice(case, grads)
            if choice == "native":
                whole[grads] = True
                # The calls the native kernel does not take whole run on SDPA.
                table[key] = sdpa
            elif choice in ATTENTION_FUNCTIONS:
                table[key] = ATTENTION_FUNCTIONS[choice]
            else:
                table[key] = SdpaBackend(choice) if choice not in (None, "default") else sdpa
    m.attend = AttentionChoice(table)
    m.attend_packed = NativePacked(whole[False], whole[True]) if any(whole.values()) else None


def _attention_choice(case: AttentionCase, grads: bool) -> str | None:
    if case.device == "cuda":
        if case.layout == "cache" or case.dropout:  # each backend draws its own dropout masks: torch picks
            return None
        return sdpa_backend(case.batch, case.heads, case.q_len, case.k_len, case.head_dim, case.dtype, case.causal,
                            grads, masked=case.masked, device="cuda")
    if case.device != "cpu":
        return None
    return attention_kernel(case.batch, case.heads, case.q_len, case.k_len, case.head_dim, case.dtype,
                            case.causal, grads, masked=case.masked, layout=case.layout)
