"""Make `import torchvision` survive on a CPU-only torch, so that timm and transformers import.

Why this exists: timm imports torchvision at `import timm`, and transformers' model modules
import it when it is installed. The only torchvision wheel matching torch 2.13.0 is a CUDA
build; its compiled `_C.so` cannot load against the CPU torch we test with, and then
`torchvision/_meta_registrations.py` dies registering fake kernels for `torchvision::nms` and
`torchvision::qnms` ("operator torchvision::nms does not exist"). Nothing in the weight
conversion uses those operators: defining their two schemas (without kernels) is enough for
the import to succeed. Where `_C.so` does load (a matching build), we do nothing.
"""
from __future__ import annotations

import importlib.util
import os

_LIB = None  # keeps the torch.library.Library alive: the definitions vanish with it
_CHECKED = False


def ensure_torchvision_importable() -> None:
    """Call before importing timm or transformers. Idempotent; a no-op without torchvision."""
    global _LIB, _CHECKED
    if _CHECKED:
        return
    _CHECKED = True
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.origin:
        return
    import torch
    lib_path = os.path.join(os.path.dirname(spec.origin), "_C.so")
    if not os.path.exists(lib_path):
        return
    try:
        torch.ops.load_library(lib_path)
    except (OSError, RuntimeError):  # CUDA-built extension on a CPU torch
        try:
            _LIB = torch.library.Library("torchvision", "DEF")
            _LIB.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
            _LIB.define("qnms(Tensor qdets, Tensor scores, float iou_threshold) -> Tensor")
        except RuntimeError:  # already defined by someone else: nothing left to do
            pass
