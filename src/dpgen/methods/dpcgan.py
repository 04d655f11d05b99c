"""DP-CGAN (Torkzadehmahani, Kairouz & Paten 2019): a conditional GAN whose discriminator's gradients on real and
on generated samples are clipped per example apart, and noised (their reference code noises the real part only;
the sum is the same in distribution: `fake_term=clipped`)."""
from __future__ import annotations

from dpgen.methods.dpgan import DPSGDGAN


class DPCGAN(DPSGDGAN):
    """Reference nets (their MNIST script): G [z 100, y] -> 128 ReLU -> 784 sigmoid, D [x, y] -> 128 ReLU -> 1,
    the label at the input only; BCE losses; D by (DP-)SGD lr 0.1, G by Adam lr 1e-3; one discriminator step
    per generator step; batch 600, noise multiplier 1.12, clip 1.1.

    Accounting as the mechanism runs: noise std sigma C over sensitivity C, i.e. sigma (the reference script
    passes sigma * C to its RDP accountant, which understates epsilon for C > 1). Generated samples get
    public uniform labels; the reference reuses the private batch's labels, a release the accountant misses."""

    def __init__(self, shape, num_classes, kind, z_dim: int = 100, batch_size: int = 600,
                 noise_multiplier: float = 1.12, max_grad_norm: float = 1.1, critic_steps: int = 1,
                 objective: str = "bce", optimizer_g: dict | None = None, optimizer_d: dict | None = None,
                 generator: dict | None = None, discriminator: dict | None = None, **kwargs):
        fc = {"hidden": (128,), "activation": "relu", "feature_bound": None, "label_every_layer": False}
        generator, discriminator = (({**fc, **net} if net.get("arch", "fc") == "fc" else net)
                                    for net in (dict(generator or {}), dict(discriminator or {})))
        super().__init__(shape, num_classes, kind, z_dim=z_dim, batch_size=batch_size,
                         noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm, critic_steps=critic_steps,
                         objective=objective, optimizer_g=optimizer_g or {"name": "adam", "lr": 1e-3},
                         optimizer_d=optimizer_d or {"name": "sgd", "lr": 0.1},
                         generator=generator, discriminator=discriminator,
                         **kwargs)
