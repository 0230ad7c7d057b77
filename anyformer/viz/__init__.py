"""Floor 4: pictures of models and runs. Training curves and the confusion matrix (`plots`);
attention: the maths of maps and rollout (`rollout`), attention taken from a model (`capture`)
and its figures (`attention_plots`). Figures are drawn off-screen with Agg and written as PNG.
"""
from .attention_plots import plot_digit_attention, plot_image_attention, plot_token_attention
from .capture import image_attention, stream_attention
from .plots import plot_confusion, plot_curves, read_metrics
from .rollout import HEAD_FUSIONS, attention_rollout, cls_attention_maps, fuse_heads, rollout_map, upsample_map

__all__ = ["HEAD_FUSIONS", "attention_rollout", "cls_attention_maps", "fuse_heads", "image_attention",
           "plot_digit_attention", "plot_image_attention", "plot_token_attention", "rollout_map",
           "stream_attention", "upsample_map", "plot_confusion", "plot_curves", "read_metrics"]
