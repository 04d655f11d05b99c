"""DPGradAgg (G-PATE Algorithm 2), dpgen.aggregation.dpgradagg."""
import numpy as np
import torch

from dpgen.aggregation import dpgradagg
from dpgen.aggregation.dpgradagg import DPGradAggParams


def test_no_projection_answers_every_coordinate_with_its_bin_midpoint():
    # 4 unanimous teachers, 2 samples of 3 coordinates, c = 1, B = 4 bins of width 0.5 with midpoints
    # -0.75, -0.25, 0.25, 0.75: 0.3 -> bin 2 (0.25), -0.6 -> bin 0 (-0.75), 2.0 clipped to 1 -> bin 3 (0.75),
    # -0.1 -> bin 1 (-0.25), 0.0 -> bin 2 (0.25), -5 clipped to -1 -> bin 0 (-0.75)
    p = DPGradAggParams(clip=1.0, bins=4, proj_dim=None, sigma1=1e-6, sigma2=1e-6, threshold=0.5)
    grads = torch.tensor([[0.3, -0.6, 2.0], [-0.1, 0.0, -5.0]], dtype=torch.float64).expand(4, 2, 3)
    private, release = dpgradagg.dp_grad_agg(grads, p, np.array([2.0, 8.0]), torch.Generator().manual_seed(0))
    torch.testing.assert_close(private, torch.tensor([[0.25, -0.75, 0.75], [-0.25, 0.25, -0.75]],
                                                     dtype=torch.float64), rtol=0, atol=1e-12)
    assert len(release.answered) == 6 and release.answered.all()  # one query per coordinate
    assert p.queries_per_sample(784) == 784 and DPGradAggParams(proj_dim=10).queries_per_sample(784) == 10


def test_projection_makes_k_queries_per_sample_and_back_projects_with_the_same_matrix():
    # 3 unanimous teachers, 5 samples of 6 coordinates, k = 2: 10 queries. The projection R (6 x 2 per sample,
    # N(0, 1/2) entries) is the first draw from the generator, so a generator with the same seed redraws it.
    # With c = 1 and B = 2 bins ([-1, 0) and [0, 1], midpoints -0.5 and 0.5) each answer is 0.5 sign(g R),
    # and the private gradient is R (0.5 sign(g R)).
    p = DPGradAggParams(clip=1.0, bins=2, proj_dim=2, sigma1=1e-6, sigma2=1e-6, threshold=0.5)
    g = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    private, release = dpgradagg.dp_grad_agg(g.expand(3, 5, 6), p, np.array([2.0]), torch.Generator().manual_seed(0))
    r = torch.randn(5, 6, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64) / 2**0.5
    u = torch.einsum("sd,sdk->sk", g, r)
    want = torch.einsum("sdk,sk->sd", r, torch.where(u >= 0, 0.5, -0.5).to(torch.float64))
    assert len(release.answered) == 10 and release.answered.all() and (release.votes.max(1) == 3).all()
    torch.testing.assert_close(private, want, rtol=0, atol=1e-12)
