"""How conditional nets see the class label: one-hot rows, and constant feature maps for convolutions."""
from __future__ import annotations

import torch


def one_hot(y: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """One-hot rows of labels y (any shape), by comparison (works under torch.func.vmap, unlike F.one_hot)."""
    return (y.unsqueeze(-1) == torch.arange(num_classes, device=y.device)).to(dtype)


def label_maps(onehot: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """The one-hot label as constant feature maps (the reference DCGAN code's conv_cond_concat)."""
    return onehot[..., None, None].expand(*onehot.shape, height, width)


def concat_label_maps(h: torch.Tensor, onehot: torch.Tensor) -> torch.Tensor:
    """Feature maps h (b, C, H, W) with the label maps appended as K more channels."""
    return torch.cat([h, label_maps(onehot, h.shape[-2], h.shape[-1])], 1)
