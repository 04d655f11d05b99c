"""GS-WGAN's gradient sanitizer (Chen et al. 2020, Sec. 3.2): the only path from a private discriminator
to the generator. Per generated sample, the gradient of the critic loss w.r.t. that sample is clipped to L2
norm C and gets N(0, (sensitivity * sigma)^2 I) noise, sensitivity = 2C (reference code: SENSITIVITY = 2)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from dpgen.privacy.cost import StepCost
from dpgen.privacy.gswgan import BOUND_ALIASES, GSWGAN_ORDERS, PLD_BOUNDS, check_draw, rdp_gswgan_step, sound_pld_events


@dataclass(frozen=True)
class SanitizerParams:
    """clip C = 1 as the paper normalises it; noise std = 2 C noise_multiplier. `draw`: one critic for the step's
    batch ("per_step", the paper) or one for each sample, independently ("per_sample"; dpgen.privacy.gswgan)."""

    n_discriminators: int
    clip: float = 1.0
    noise_multiplier: float = 1.07
    draw: str = "per_step"

    def __post_init__(self):
        if self.n_discriminators < 1 or not self.clip > 0 or not self.noise_multiplier > 0:
            raise ValueError(f"need n_discriminators >= 1, clip > 0, noise_multiplier > 0; got {self}")
        check_draw(self.draw)

    @property
    def sensitivity(self) -> float:
        """Replacing the chosen discriminator moves each clipped gradient by at most 2C."""
        return 2.0 * self.clip

    def rdp(self, batch_size: int, orders: np.ndarray) -> dict:
        """RDP of one sanitized batch under both bounds (dpgen.privacy.gswgan)."""
        return rdp_gswgan_step(self.n_discriminators, batch_size, self.noise_multiplier, orders, self.draw)

    def pld_events(self, batch_size: int) -> tuple[dict, int]:
        """(PLD event, count) of one sanitized batch under the sound bound (dpgen.privacy.gswgan.sound_pld_events)."""
        return sound_pld_events(self.n_discriminators, batch_size, self.noise_multiplier, self.draw)

    def step_cost(self, batch_size: int, pld: bool = True) -> StepCost:
        """One GS-WGAN generator step: one sanitized batch, known in advance under both bounds; with `pld`, its
        PLD event too (only where each step is the subsampled mechanism, critic_updates in SUBSAMPLED_UPDATES)."""
        events = (self.pld_events(batch_size),) if pld else ()
        return StepCost(self.rdp(batch_size, GSWGAN_ORDERS), GSWGAN_ORDERS, aliases=BOUND_ALIASES,
                        pld_events=events, pld_bounds=PLD_BOUNDS)


def sanitize(grads: torch.Tensor, p: SanitizerParams, orders: np.ndarray, generator: torch.Generator | None = None):
    """grads (B, *shape): row i = d critic_loss(x_i) / d x_i. Returns (sanitized grads, RDP spent by bound)."""
    flat = grads.flatten(1)
    norms = flat.norm(dim=1, keepdim=True)
    clipped = flat * (p.clip / (norms + 1e-12)).clamp(max=1.0)
    noise = torch.randn(clipped.shape, generator=generator, dtype=clipped.dtype).to(clipped.device)
    sanitized = clipped + noise * (p.sensitivity * p.noise_multiplier)
    return sanitized.view_as(grads), p.rdp(len(grads), orders)
