"""DPGradAgg (G-PATE Algorithm 2), dpgen.aggregation.dpgradagg."""
import numpy as np
import pytest
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


def test_smooth_projection_of_one_grid_cell_is_constant_and_gives_the_sign_of_the_pixel_sum():
    # smooth = 1: each direction is one N(0, 1) draw upsampled to a constant image, scaled to norm
    # sqrt(dim / k), i.e. every entry s / sqrt(k) with s = +-1. With c = 1, B = 2 (midpoints -+0.5) and unanimous
    # teachers each answer is 0.5 sign(s sum(g)), so a_k r_k = 0.5 sign(sum(g)) / sqrt(k) in every pixel for
    # every k, whatever the draws: the private gradient is 0.5 sqrt(k) sign(sum(g)) everywhere.
    k, shape = 4, (1, 3, 5)
    p = DPGradAggParams(clip=1.0, bins=2, proj_dim=k, sigma1=1e-6, sigma2=1e-6, threshold=0.5, smooth=1)
    g = torch.randn(6, 15, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    private, release = dpgradagg.dp_grad_agg(g.expand(3, 6, 15), p, np.array([2.0]),
                                             torch.Generator().manual_seed(0), shape=shape)
    want = 0.5 * k**0.5 * torch.sign(g.sum(1, keepdim=True)).expand(6, 15)
    assert len(release.answered) == 6 * k and release.answered.all()  # k queries per sample, as Algorithm 2
    torch.testing.assert_close(private, want, rtol=0, atol=1e-12)


def test_smooth_directions_have_the_gaussian_norm_and_little_pixel_to_pixel_variation():
    n, k, shape = 50, 10, (1, 28, 28)
    gauss = dpgradagg.projection(n, shape, k, None, torch.Generator().manual_seed(0))
    smooth = dpgradagg.projection(n, shape, k, 7, torch.Generator().manual_seed(0))
    assert gauss.shape == smooth.shape == (n, 784, k)
    torch.testing.assert_close(smooth.norm(dim=1), torch.full((n, k), (784 / k) ** 0.5))

    def neighbour_variation(r):  # mean squared difference of horizontal neighbours / mean square
        img = r.transpose(1, 2).reshape(n, k, 28, 28)
        return ((img[..., 1:] - img[..., :-1]) ** 2).mean() / (img**2).mean()

    # i.i.d. entries: E(a - b)^2 / E a^2 = 2; a 7 x 7 grid upsampled 4x varies over ~4 pixels: about 0.1
    assert neighbour_variation(gauss) == pytest.approx(2.0, rel=0.05)
    assert neighbour_variation(smooth) < 0.2


def test_smooth_projection_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="needs proj_dim"):
        DPGradAggParams(proj_dim=None, smooth=7)
    with pytest.raises(ValueError, match="grid size"):
        DPGradAggParams(smooth=0)
    p = DPGradAggParams(clip=1.0, bins=2, proj_dim=2, sigma1=1.0, sigma2=1.0, smooth=3)
    with pytest.raises(ValueError, match="image shape"):
        dpgradagg.dp_grad_agg(torch.zeros(2, 3, 4), p, np.array([2.0]), shape=(4,))
    with pytest.raises(ValueError, match="does not have"):
        dpgradagg.dp_grad_agg(torch.zeros(2, 3, 4), p, np.array([2.0]), shape=(1, 3, 3))


@pytest.mark.parametrize("proj_dim", [3, None])
def test_projecting_chunks_of_teachers_then_aggregating_is_dp_grad_agg(proj_dim):
    # the G-PATE step projects each chunk of teachers as their gradients are computed; with the same secret
    # generator (projection drawn first, then the noise) it releases exactly what dp_grad_agg releases
    p = DPGradAggParams(clip=0.5, bins=4, proj_dim=proj_dim, sigma1=2.0, sigma2=1.0, threshold=0.5)
    grads = torch.randn(7, 4, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) * 0.3
    orders = np.array([2.0, 8.0])
    whole, whole_release = dpgradagg.dp_grad_agg(grads, p, orders, torch.Generator().manual_seed(5), shape=(12,))
    noise = torch.Generator().manual_seed(5)
    proj = dpgradagg.draw_projection(4, (12,), p, noise, torch.float64)
    chunks = torch.cat([dpgradagg.project(grads[s:s + 3], proj) for s in range(0, 7, 3)])
    private, release = dpgradagg.aggregate(chunks, proj, p, orders, noise)
    torch.testing.assert_close(private, whole, rtol=0, atol=1e-15)
    assert np.array_equal(release.votes, whole_release.votes) and np.array_equal(release.answered,
                                                                                  whole_release.answered)
    assert all(np.array_equal(release.rdp[k], whole_release.rdp[k]) for k in release.rdp)
    if proj_dim is not None:
        with pytest.raises(ValueError, match="do not match"):
            dpgradagg.project(grads[:, :3], proj)
