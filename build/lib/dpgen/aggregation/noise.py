"""Randomness that privacy depends on: the noise of every mechanism and the secret subsampling of DP-SGD.

It is seeded from the operating system's entropy, never from the run's `seed`: the seed is written into
the run folder, and noise that can be regenerated from a published seed can be subtracted, which voids the
guarantee. A resumed run gets fresh randomness too, so no noise value is ever used twice."""
from __future__ import annotations

import secrets

import torch


def secret_generator(device: torch.device | str | None = None) -> torch.Generator:
    return torch.Generator(device=device or "cpu").manual_seed(secrets.randbits(63))
