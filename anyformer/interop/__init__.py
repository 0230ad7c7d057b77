"""Floor 3: weight conversion to and from timm and Hugging Face layouts.

Nothing here imports timm, transformers or tokenizers at import time; each conversion imports
what it needs when called and says what to `pip install` when it is missing.

    vit = ViT.from_timm(timm_model_or_state_dict, image_size=(h, w))   # anyformer.interop.timm
    sd = vit.to_timm()
    vit = ViT.from_hf(vit_model); hf = vit.to_hf()                     # anyformer.interop.hf
    gpt = GPT.from_hf(gpt2_lm_head_model); hf = gpt.to_hf()
    enc = TextEncoder.from_hf(bert_model)                              # anyformer.interop.hf_bert
    enc, tok = load_minilm(); emb = embed_sentences(enc, tok, ["a", "b"])   # anyformer.interop.minilm
"""
from ._common import check_state_dict, require_timm, require_transformers, resample_pos_embed
from ._torchvision_compat import ensure_torchvision_importable
from .minilm import embed_sentences, load_minilm

__all__ = ["check_state_dict", "embed_sentences", "ensure_torchvision_importable", "load_minilm",
           "require_timm", "require_transformers", "resample_pos_embed"]
