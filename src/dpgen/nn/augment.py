"""Random translations of image batches: the teachers' data augmentation (`teachers.augment`).

Translation is the augmentation of DiffAugment (Zhao et al., NeurIPS 2020), which lets a GAN discriminator learn
from a few hundred images: real and fake batches are shifted alike, so the discriminator cannot tell them apart by
the shift. Here it is applied where a G-PATE teacher trains, on its own records and the fakes; it uses no other
data and releases nothing, so it costs no privacy."""
from __future__ import annotations

import torch


def translate(x: torch.Tensor, shift: int) -> torch.Tensor:
    """x (..., C, H, W) with each image moved by its own uniform integer offset in [-shift, shift] along H and W;
    pixels moved in from outside are 0 (the background of the image data)."""
    if shift <= 0:
        return x
    c, h, w = x.shape[-3:]
    flat = x.reshape(-1, c, h, w)
    n = len(flat)
    padded = torch.nn.functional.pad(flat, (shift, shift, shift, shift))
    dy, dx = (torch.randint(0, 2 * shift + 1, (n, 1), device=x.device) for _ in range(2))
    rows = (dy + torch.arange(h, device=x.device))[:, None, :, None]
    cols = (dx + torch.arange(w, device=x.device))[:, None, None, :]
    out = padded[torch.arange(n, device=x.device)[:, None, None, None], torch.arange(c, device=x.device)[None, :, None, None],
                 rows, cols]
    return out.reshape(x.shape)
