"""Shared test set-up."""
import pytest
import torch

# Small tensors: one thread avoids OpenMP spin-waiting when the two cores are shared (measured 10x+ faster).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def reproducible_privacy_noise(monkeypatch, request):
    """Privacy noise is seeded from the OS's entropy (aggregation/noise.py); tests fix it to be repeatable.
    Tests marked `secret_noise` see the real behaviour."""
    if "secret_noise" not in request.keywords:
        monkeypatch.setattr("dpgen.aggregation.noise.secrets.randbits", lambda bits: 12345)
