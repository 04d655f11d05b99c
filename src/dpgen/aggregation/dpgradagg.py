"""DPGradAgg: G-PATE's differentially private gradient aggregator (G-PATE section 4.2, Algorithm 2)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import distributed as dist
from torch.nn import functional as F

from dpgen.privacy import laplace
from dpgen.privacy.cost import StepCost
from dpgen.privacy.pate import (rdp_confident_gnmax_batch, rdp_gnmax_data_independent, rdp_threshold_cheapest,
                                rdp_threshold_data_independent)


@dataclass(frozen=True)
class DPGradAggParams:
    """Algorithm 2 inputs. `threshold` is a fraction of the teachers (0.5 in appendix E). `proj_dim=None`: no
    projection (R = identity, one query per coordinate; Table 4 "N/A").

    `smooth=S` (images only; NOT the paper's algorithm, a dpgen option): each of the k projection directions is
    drawn on an S x S grid per channel and upsampled bilinearly to the image, scaled to the norm sqrt(dim / k) of
    Algorithm 2's N(0, 1/k) columns. Still data-independent, so it changes no privacy cost; it keeps the
    low-frequency part of the teachers' gradients, where they agree, instead of pixel noise (docs/LOG.md).
    None: Algorithm 2's i.i.d. entries."""

    clip: float = 1e-4
    bins: int = 10
    proj_dim: int | None = 10
    sigma1: float = 3000.0
    sigma2: float = 1000.0
    threshold: float = 0.5
    smooth: int | None = None

    def __post_init__(self):
        if self.smooth is not None and (self.smooth < 1 or self.proj_dim is None):
            raise ValueError(f"smooth is a grid size >= 1 for projection directions and needs proj_dim; got {self}")
        if self.clip <= 0 or self.bins < 2 or (self.proj_dim is not None and self.proj_dim < 1):
            raise ValueError(f"need clip > 0, bins >= 2, proj_dim >= 1 or None; got {self}")
        if self.sigma1 <= 0 or self.sigma2 <= 0:
            raise ValueError(f"noise scales must be positive, got sigma1={self.sigma1}, sigma2={self.sigma2}")
        if not 0 < self.threshold <= 1:
            raise ValueError(f"threshold is a fraction of the teachers in (0, 1], got {self.threshold}")

    def queries_per_sample(self, dim: int) -> int:
        """Confident-GNMax queries per aggregated gradient of `dim` coordinates: k, or dim without projection."""
        return dim if self.proj_dim is None else self.proj_dim


@dataclass
class Release:
    """What one call spent: one Confident-GNMax query per projected coordinate of every sample."""

    votes: np.ndarray        # (queries, bins) vote histograms
    answered: np.ndarray     # (queries,) bool: passed the noisy threshold check
    rdp: dict                # bound name -> RDP vector over the orders, summed over the queries


def vote_histograms(projected: torch.Tensor, clip: float, bins: int) -> torch.Tensor:
    """Algorithm 2 lines 6-7: clip each teacher's coordinate to [-c, c] and count teachers per bin of width 2c/B.

    projected: (teachers, queries) -> (queries, bins) integer counts."""
    clipped = projected.clamp(-clip, clip)
    index = ((clipped + clip) / (2 * clip / bins)).floor().long().clamp_(0, bins - 1)
    counts = torch.zeros(projected.shape[1], bins, dtype=torch.long, device=projected.device)
    return counts.scatter_add_(1, index.T, torch.ones_like(index.T))


def confident_gnmax(votes: torch.Tensor, n_teachers: int, p: DPGradAggParams, generator=None):
    """Appendix D, Algorithm 3, per query (row): answered if max vote + N(0, s1^2) >= T * n_teachers,
    then argmax of votes + N(0, s2^2). Returns (answered bool, chosen bin)."""
    v = votes.to(torch.float64)
    noise1 = torch.randn(v.shape[0], generator=generator, dtype=v.dtype, device=v.device) * p.sigma1
    answered = v.max(1).values + noise1 >= p.threshold * n_teachers
    noise2 = torch.randn(v.shape, generator=generator, dtype=v.dtype, device=v.device) * p.sigma2
    return answered, (v + noise2).argmax(1)


def projection(n_samples: int, shape, k: int, smooth: int | None, generator=None, dtype=torch.float32,
               device=None) -> torch.Tensor:
    """Projection matrices R (n_samples, dim, k), one per sample. Algorithm 2 line 3: i.i.d. N(0, 1/k) entries.
    `smooth=S` (DPGradAggParams): each column drawn on an S x S grid per channel of the image `shape` (C, H, W),
    upsampled bilinearly, and scaled to the norm sqrt(dim / k) that N(0, 1/k) columns have on average."""
    dim = int(np.prod(shape))
    if smooth is None:
        return torch.randn(n_samples, dim, k, generator=generator, dtype=dtype, device=device) / k**0.5
    if len(shape) != 3:
        raise ValueError(f"smooth projection directions need an image shape (C, H, W), got {tuple(shape)}")
    grid = torch.randn(n_samples * k, shape[0], smooth, smooth, generator=generator, dtype=dtype, device=device)
    r = F.interpolate(grid, size=tuple(shape[1:]), mode="bilinear", align_corners=False).view(n_samples, k, dim)
    r = r * ((dim / k) ** 0.5 / r.norm(dim=2, keepdim=True))
    return r.transpose(1, 2)


def dp_grad_agg(grads: torch.Tensor, p: DPGradAggParams, orders: np.ndarray, generator=None, shape=None,
                distributed: bool = False):
    """Algorithm 2 for a batch: grads (teachers, samples, dim) -> (private gradients (samples, dim), Release).

    Each sample gets a NEW projection R ~ N(0, 1/k)^(dim x k) (data-independent, so free; smooth directions of
    the sample `shape` with `p.smooth`); each of the k projected coordinates is one Confident-GNMax query;
    unanswered coordinates are 0; the answer is the midpoint of the chosen bin; back-projection is u_priv R^T
    (lines 3-11). Without projection (`proj_dim=None`, Table 4 "N/A") every coordinate of the gradient is a
    query and R is the identity. The same as `aggregate(project(grads, R), R)` with R = `draw_projection()`;
    a caller that projects each chunk of teachers as it computes their gradients never holds all of them.

    `distributed=True` (torch.distributed initialised): `grads` are this process's slice of the teachers. The
    projection and the noise are drawn by rank 0 alone (from its `generator`) and broadcast; the vote histograms,
    sums over teachers, are all-reduced exactly; every process returns the same private gradients and Release."""
    n_samples, dim = grads.shape[1:]
    if shape is not None and int(np.prod(shape)) != dim:
        raise ValueError(f"sample shape {tuple(shape)} does not have the gradients' {dim} coordinates")
    proj = draw_projection(n_samples, (dim,) if shape is None else shape, p, generator, grads.dtype, grads.device,
                           distributed)
    return aggregate(project(grads, proj), proj, p, orders, generator, distributed)


def draw_projection(n_samples: int, shape, p: DPGradAggParams, generator=None, dtype=torch.float32, device=None,
                    distributed: bool = False) -> torch.Tensor | None:
    """Algorithm 2 line 3: the projections R (n_samples, dim, k) of one batch of samples of `shape`, drawn by
    rank 0 and broadcast when `distributed`; None without projection (`proj_dim=None`)."""
    if p.proj_dim is None:
        return None
    dim = int(np.prod(shape))
    if not distributed or dist.get_rank() == 0:
        proj = projection(n_samples, shape, p.proj_dim, p.smooth, generator, dtype, device)
    else:
        proj = torch.empty(n_samples, dim, p.proj_dim, dtype=dtype, device=device)
    return from_lead(proj, distributed)


def project(grads: torch.Tensor, proj: torch.Tensor | None) -> torch.Tensor:
    """Algorithm 2 line 4 for each teacher t and sample j: u_tj = g_tj R_j, (teachers, samples, dim) ->
    (teachers, samples, k). Linear, so it may be applied to any subset of the teachers. Without projection
    (`proj` None) the gradients themselves."""
    if proj is None:
        return grads
    if grads.shape[1:] != proj.shape[:2]:
        raise ValueError(f"gradients {tuple(grads.shape)} do not match projections {tuple(proj.shape)}")
    return torch.einsum("tsd,sdk->tsk", grads, proj)


def aggregate(projected: torch.Tensor, proj: torch.Tensor | None, p: DPGradAggParams, orders: np.ndarray,
              generator=None, distributed: bool = False):
    """Algorithm 2 lines 5-11 on the projected gradients `project(grads, proj)` (teachers, samples, k) of every
    teacher (this process's slice when `distributed`): vote histograms, Confident-GNMax per coordinate, bin
    midpoints, back-projection u_priv R^T -> (private gradients (samples, dim), Release)."""
    n_local, n_samples, k = projected.shape
    lead = not distributed or dist.get_rank() == 0
    n_teachers = n_local if not distributed else int(all_summed(torch.tensor([n_local], device=projected.device)))
    votes = vote_histograms(projected.reshape(n_local, n_samples * k), p.clip, p.bins)
    votes = all_summed(votes) if distributed else votes
    if lead:
        answered, chosen = confident_gnmax(votes, n_teachers, p, generator)
    else:
        answered, chosen = (torch.empty(len(votes), dtype=dtype, device=votes.device) for dtype in (torch.bool, torch.long))
    answered, chosen = from_lead(answered, distributed), from_lead(chosen, distributed)
    width = 2 * p.clip / p.bins
    midpoint = -p.clip + (chosen.to(projected.dtype) + 0.5) * width
    u_priv = torch.where(answered, midpoint, torch.zeros_like(midpoint)).view(n_samples, 1, k)
    private = u_priv.view(n_samples, k) if proj is None else (u_priv @ proj.transpose(1, 2)).squeeze(1)
    votes_np, answered_np = votes.cpu().numpy(), answered.cpu().numpy()
    dep, indep = rdp_confident_gnmax_batch(votes_np, p.threshold * n_teachers, p.sigma1, p.sigma2, orders,
                                           answered_np)
    release = Release(votes_np, answered_np, {"data_dependent": dep, "data_independent": indep})
    return private, release


def all_summed(t: torch.Tensor) -> torch.Tensor:
    """The elementwise sum of `t` over all processes (exact for integer counts)."""
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def from_lead(t: torch.Tensor, distributed: bool) -> torch.Tensor:
    """Rank 0's `t` on every process (bool tensors travel as uint8)."""
    if not distributed:
        return t
    wire = t.to(torch.uint8) if t.dtype == torch.bool else t.contiguous()
    dist.broadcast(wire, src=0)
    return wire.to(t.dtype)


def worst_case_rdp(p: DPGradAggParams, n_queries: int, orders: np.ndarray) -> np.ndarray:
    """Data-independent RDP of n_queries answered queries (threshold check + GNMax each): appendix D."""
    return n_queries * (rdp_threshold_data_independent(p.sigma1, orders) + rdp_gnmax_data_independent(p.sigma2, orders))


def step_cost(p: DPGradAggParams, teachers: int, queries: int, orders, class_ratio_epsilon: float | None = None,
              ) -> StepCost:
    """One G-PATE iteration: `queries` Confident-GNMax queries (appendix D). Worst: every query answered,
    data-independent. Best, a lower bound on any iteration: each query pays its threshold check alone (no query
    answered), under the data-dependent bound (the one the paper reports) at the votes where the check costs least.
    Upfront: the Laplace class ratio (section 6.2), when released."""
    orders = np.asarray(orders, dtype=float)
    worst = worst_case_rdp(p, queries, orders)
    # appendix D: a query costs eps1 (its threshold check) if refused, eps1 + eps2 if answered: eps1 at the least
    cheapest = rdp_threshold_cheapest(teachers, p.bins, p.threshold * teachers, p.sigma1, orders)
    upfront = None if class_ratio_epsilon is None else {
        "data_independent": laplace.rdp_laplace(class_ratio_epsilon, orders)}
    return StepCost({"data_independent": worst}, orders, upfront=upfront,
                    best={"data_dependent": queries * cheapest,
                          "data_independent": queries * rdp_threshold_data_independent(p.sigma1, orders)})
