"""Export a model to ONNX, for ONNX Runtime and the other runtimes that read it.

    export_onnx(vit, "vit.onnx")      # images (B, C, H, W) -> logits (B, classes)
    export_onnx(gpt, "gpt.onnx")      # idx (B, T) -> logits (B, T, vocab): the full-sequence forward
    export_onnx(enc, "enc.onnx")      # input_ids, attention_mask (B, N) -> hidden states (B, N, D)
    export_onnx(table, "table.onnx")  # numbers (B, F_num), NaN missing; categories (B, F_cat) -> logits or numbers

The batch axis is dynamic, and so is the sequence axis of the language model and the text encoder
(up to their context / max_positions). torch's export-based exporter (`dynamo=True`) writes the
graph; onnx, onnxscript and onnxruntime are imported only when a function here runs.
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import Tensor, nn

from ..files import atomic_path
from ..models.base import config_to_dict

__all__ = ["EXPORTABLE", "export_onnx", "onnx_inputs", "onnx_metadata", "require_onnx", "run_onnx"]

EXPORTABLE = ("vit", "gpt", "text-encoder", "table")
_INSTALL = 'pip install "anyformer[onnx]" (onnx, onnxscript and onnxruntime)'


def require_onnx(runtime: bool = False) -> None:
    """ImportError in one line, naming the extra to install, when the exporter (or runtime) is missing."""
    names = ("onnx", "onnxscript") + (("onnxruntime",) if runtime else ())
    for name in names:
        try:
            __import__(name)
        except ImportError:
            raise ImportError(f"ONNX export needs the {name} package, which is not installed: {_INSTALL}") from None


class _TextEncoderGraph(nn.Module):
    """The encoder's forward with its mask as a positional input: exporters name inputs by position."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        return self.model(input_ids, attention_mask)


class _TableGraph(nn.Module):
    """A table model's forward taking only the inputs its columns need: a graph input with no columns
    (a table of categories alone, say) would be a zero-width tensor, which exporters specialise away."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *inputs: Tensor) -> Tensor:
        c = self.model.config
        numbers = inputs[0] if c.numbers else None
        categories = inputs[-1] if c.categories else None
        return self.model(numbers, categories)


def _table_inputs(c: Any, batch: int, generator: torch.Generator | None) -> dict[str, Tensor]:
    inputs: dict[str, Tensor] = {}
    if c.numbers:
        numbers = torch.randn(batch, c.numbers, generator=generator)
        numbers[0, 0] = float("nan")  # a missing cell: the graph keeps its branch, not a constant
        inputs["numbers"] = numbers
    if c.categories:
        inputs["categories"] = torch.stack([torch.randint(0, k, (batch,), generator=generator) for k in c.categories], 1)
    return inputs


def onnx_inputs(model: nn.Module, batch: int = 2, seq_len: int | None = None,
                generator: torch.Generator | None = None) -> dict[str, Tensor]:
    """Example inputs for `model`, by the names the exported graph gives them."""
    family, c = getattr(model, "family", None), getattr(model, "config", None)
    if family == "vit":
        h, w = (c.image_size, c.image_size) if isinstance(c.image_size, int) else tuple(c.image_size)
        return {"images": torch.randn(batch, c.in_chans, h, w, generator=generator)}
    if family == "gpt":
        n = seq_len or min(8, c.context)
        return {"idx": torch.randint(0, c.vocab_size, (batch, n), generator=generator)}
    if family == "text-encoder":
        n = seq_len or min(8, c.max_positions)
        mask = torch.ones(batch, n, dtype=torch.long)
        mask[1::2, n // 2 + 1:] = 0  # every second sequence padded: the mask is exercised, not constant
        return {"input_ids": torch.randint(0, c.vocab_size, (batch, n), generator=generator), "attention_mask": mask}
    if family == "table":
        return _table_inputs(c, batch, generator)
    raise ValueError(f"ONNX export supports the families {', '.join(EXPORTABLE)}; got a model of family "
                     f"{family!r} ({type(model).__name__})")


def _graph(model: nn.Module) -> tuple[nn.Module, list[str], list[str], tuple[dict[int, Any], ...]]:
    family = model.family
    batch = torch.export.Dim("batch", min=1, max=1 << 16)
    if family == "vit":
        return model, ["images"], ["logits"], ({0: batch},)
    if family == "table":
        names = [n for n, k in (("numbers", model.config.numbers), ("categories", model.config.categories)) if k]
        out = "logits" if model.config.task == "classify" else "predictions"
        return _TableGraph(model), names, [out], (tuple({0: batch} for _ in names),)  # one *inputs argument
    # The sequence axis starts at 2: torch.export specialises a size-1 axis to the constant 1.
    if family == "gpt":
        seq = torch.export.Dim("seq", min=2, max=model.config.context)
        return model, ["idx"], ["logits"], ({0: batch, 1: seq},)
    seq = torch.export.Dim("seq", min=2, max=model.config.max_positions)
    return _TextEncoderGraph(model), ["input_ids", "attention_mask"], ["hidden_states"], \
        ({0: batch, 1: seq}, {0: batch, 1: seq})


# What each family's graph takes and gives, written into the file for whoever reads it.
_SIGNATURE = {
    "vit": "input images float32 (B, C, H, W), preprocessed as the anyformer.data.preprocess property says -> logits (B, classes)",
    "gpt": "input idx int64 (B, T) token ids, T <= context -> logits (B, T, vocab) for the next token",
    "text-encoder": "input_ids int64 (B, N), attention_mask int64 (B, N) (1 = token) -> hidden_states (B, N, D)",
    "table": "input numbers float32 (B, F_num), NaN where missing, and categories int64 (B, F_cat), as the "
             "anyformer.data.encoding property encodes a row (either input absent where the table has no such "
             "column) -> logits (B, classes), or predictions (B,) standardised by encoding.target_scale",
}


class _NoTorchvisionNotice(logging.Filter):
    """Drops the exporter's 'torchvision is not installed. Skipping torchvision::nms' (and roi_align,
    roi_pool, deform_conv2d): four lines on every export where torchvision is absent.

    Why a filter: torch.onnx.export builds its operator registry from all of onnxscript's torchlib,
    whose torchvision operators it looks up and, without torchvision, logs a warning for; the export
    imports nothing from torchvision, and torch.onnx.export takes no registry of our own. Only that
    message from that logger is dropped, and only while export_onnx runs."""

    LOGGER = "torch.onnx._internal.exporter._registration"

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("torchvision is not installed")

    @classmethod
    @contextlib.contextmanager
    def installed(cls) -> Iterator[None]:
        logger, f = logging.getLogger(cls.LOGGER), cls()
        logger.addFilter(f)
        try:
            yield
        finally:
            logger.removeFilter(f)


def export_onnx(model: nn.Module, path: str | os.PathLike[str], *, opset: int | None = None,
                metadata: dict[str, str] | None = None) -> Path:
    """Write `model` (ViT, GPT or TextEncoder) to the ONNX file `path`, atomically, and return it.

    The file's metadata properties hold the model's family, config and signature, and `metadata`
    (e.g. a run's preprocessing, classes or vocabulary, as `anyformer export` adds): what a runtime
    needs to feed the graph and read its answer."""
    require_onnx()
    from .. import plan
    example = onnx_inputs(model)  # raises the one-line error for a family that cannot be exported
    graph, inputs, outputs, dynamic = _graph(model)
    was_training = model.training
    graph.eval()  # dropout off: the file is for inference
    path = Path(path)
    if path.parent and not path.parent.exists():
        raise FileNotFoundError(f"cannot write {path}: the folder {path.parent} does not exist")
    try:
        # The plain layers, whatever the speed plan chose on this machine (a prepared model's are put
        # back after): the oneDNN linear and the native kernels are custom ops no ONNX runtime knows,
        # and the explicit attention path is only picked for speed here; SDPA and F.linear are what
        # the exporter translates into standard ONNX operators.
        with plan.unprepared(model), plan.forcing("stock"), torch.no_grad(), \
                atomic_path(path, suffix=".onnx") as tmp:
            kwargs: dict[str, Any] = {"opset_version": opset} if opset is not None else {}
            # The exporter reports its progress on stdout (a command's stdout is its answer), and the
            # libraries under it warn about their own internals: nothing a user can act on.
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings(), \
                    _NoTorchvisionNotice.installed():
                for category in (FutureWarning, DeprecationWarning):
                    warnings.simplefilter("ignore", category)
                warnings.filterwarnings("ignore", category=UserWarning, module=r"(torch|torchvision|onnxscript|onnx)\b")
                torch.onnx.export(graph, tuple(example.values()), tmp, dynamo=True, input_names=inputs,
                                  output_names=outputs, dynamic_shapes=dynamic, external_data=False,
                                  verbose=False, **kwargs)
            _write_metadata(tmp, {"anyformer.family": model.family, "anyformer.signature": _SIGNATURE[model.family],
                                  "anyformer.config": json.dumps(config_to_dict(model.config)),
                                  **(metadata or {})})
    finally:
        model.train(was_training)
    return path


def _write_metadata(path: Path, props: dict[str, str]) -> None:
    """Set the ONNX file's metadata properties (key -> string), keeping any the exporter wrote."""
    import onnx
    proto = onnx.load(str(path))
    kept = {p.key: p.value for p in proto.metadata_props if p.key not in props}
    del proto.metadata_props[:]
    for key, value in {**kept, **props}.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, str(value)
    onnx.save(proto, str(path))


def onnx_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The metadata properties of the ONNX file `path`."""
    require_onnx()
    import onnx
    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


def run_onnx(path: str | os.PathLike[str], inputs: dict[str, Tensor]) -> Tensor:
    """The first output of the ONNX file `path` on `inputs`, computed by ONNX Runtime on the CPU."""
    require_onnx(runtime=True)
    import onnxruntime as ort
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    feed = {k: v.detach().cpu().numpy() for k, v in inputs.items() if k in names}
    return torch.from_numpy(session.run(None, feed)[0])
