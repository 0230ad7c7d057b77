"""Floor 4: pictures of models and runs. Training curves and the confusion matrix (`plots`),
attention maps and rollout (`attention`). Figures are drawn off-screen with Agg and written as PNG.
"""
from .attention import (HEAD_FUSIONS, attention_rollout, cls_attention_maps, fuse_heads, image_attention,
                        plot_digit_attention, plot_image_attention, plot_token_attention, rollout_map,
                        stream_attention, upsample_map)
from .plots import plot_confusion, plot_curves, read_metrics

__all__ = ["HEAD_FUSIONS", "attention_rollout", "cls_attention_maps", "fuse_heads", "image_attention",
           "plot_digit_attention", "plot_image_attention", "plot_token_attention", "rollout_map",
           "stream_attention", "upsample_map", "plot_confusion", "plot_curves", "read_metrics"]
