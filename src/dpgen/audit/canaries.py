"""Canaries inside a real training run, scored from what each step releases (white-box, Steinke, Nasr &
Jagielski 2023): m canaries, each included by a fair coin of the auditor, and one row of m observations per
step; after the run, `scores` sums the rows of the steps the privacy budget accepted (a rolled-back step
released nothing).

- `GradientCanaries` (DP-GAN, DP-CGAN; Sec. 6): canary i is a record whose clipped gradient is C e_j(i), one
  coordinate of the discriminator's parameters. An included canary joins each Poisson batch with the run's
  sampling rate q, as every record does, so the run's (eps, delta) claim covers each canary. Observed: every
  privatized gradient sum (Opacus' `p.grad` right after the noise, what DP-SGD releases at each step).
- `VoteCanaries` (G-PATE): the N teachers' votes are replaced by N canary teachers, the worst case of one record
  (which may decide every vote of its teacher). An included canary votes its secret bin b_iq on every query q,
  an excluded one a fresh random bin. Observed: each query's answer (answered or not, the chosen bin).
"""
from __future__ import annotations

import lightning.pytorch as pl
import torch

from dpgen.aggregation import dpgradagg


class AuditError(ValueError):
    """An audit that cannot run as asked (shown as one error line)."""


class Canaries(pl.Callback):
    """What both kinds share: the coins, one observation row per step, and the scores over accepted steps."""

    def __init__(self, canaries: int, seed: int):
        self.m = int(canaries)
        self.rng = torch.Generator().manual_seed(seed)  # the auditor's own coins: independent of the run
        self.included = torch.rand(self.m, generator=self.rng) < 0.5
        self.rows: list[torch.Tensor] = []  # one row of m observations per release
        self.step_starts: list[int] = []  # len(rows) when each training step began
        self.scores: torch.Tensor | None = None
        self.releases = 0

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.ckpt_path is not None:
            raise AuditError("an audit is one uninterrupted run: it cannot resume a checkpoint")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.step_starts.append(len(self.rows))

    def on_fit_end(self, trainer, pl_module) -> None:
        accepted = pl_module.released_step(len(self.step_starts))  # an audit run starts at step 0
        end = self.step_starts[accepted] if accepted < len(self.step_starts) else len(self.rows)
        self.scores = torch.stack(self.rows[:end]).sum(0) if end else torch.zeros(self.m)
        self.releases = end


class GradientCanaries(Canaries):
    """`canaries` Dirac gradient canaries in `pl_module.dp_optimizer` (DP-GAN, DP-CGAN). Coordinates are those
    the real records' gradients move least at the start (least interference: the real gradients add to a
    canary's score whether or not it is included; on MNIST, first-layer weights of always-black pixels, though
    also of units that are inactive at the start and wake later). After fit, `scores` and `included` hold one
    entry per canary, over the steps the privacy budget accepted."""

    def __init__(self, canaries: int = 1000, seed: int = 0, probe_records: int = 10000):
        super().__init__(canaries, seed)
        self.probe_records = int(probe_records)

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        opt = getattr(pl_module, "dp_optimizer", None)
        if opt is None:
            raise AuditError(f"gradient canaries audit DP-SGD methods (dpgan, dpcgan); "
                             f"{type(pl_module).__name__} trains no discriminator with DP-SGD")
        self.clip = float(opt.max_grad_norm)
        self.rate = float(pl_module.sample_rate)
        self.coordinates = self.quiet_coordinates(pl_module, opt)
        original = opt.add_noise

        def add_noise():
            sampled = self.included & (torch.rand(self.m, generator=self.rng) < self.rate)
            for p, flat, ids in self.coordinates:
                p.summed_grad.view(-1)[flat] += self.clip * sampled[ids].to(p.summed_grad)
            original()
            row = torch.empty(self.m)
            for p, flat, ids in self.coordinates:
                row[ids] = p.grad.reshape(-1)[flat].detach().float().cpu()
            self.rows.append(row)

        opt.add_noise = add_noise

    def quiet_coordinates(self, pl_module, opt) -> list[tuple[torch.nn.Parameter, torch.Tensor, torch.Tensor]]:
        """The m coordinates whose largest per-record gradient over the training records (the first
        `probe_records`, in batches) is smallest, ties broken at random, grouped by parameter:
        (parameter, flat indices, canary ids)."""
        data = pl_module.trainer.datamodule.train_data
        activity = None
        for start in range(0, min(len(data), self.probe_records), 256):
            x, y = (t.to(pl_module.device) for t in data[torch.arange(start, min(start + 256, len(data)))])
            opt.zero_grad(set_to_none=True)
            pl_module.real_loss(pl_module.net_d(x, y)).backward()
            batch = torch.cat([p.grad_sample.abs().flatten(1).amax(0).float().cpu() for p in opt.params])
            activity = batch if activity is None else torch.maximum(activity, batch)
        opt.zero_grad(set_to_none=True)
        if activity.numel() < self.m:
            raise AuditError(f"{self.m} canaries need as many discriminator parameters; it has {activity.numel()}")
        shuffled = torch.randperm(activity.numel(), generator=self.rng)
        chosen = shuffled[torch.argsort(activity[shuffled], stable=True)[:self.m]]
        groups, start = [], 0
        for p in opt.params:
            inside = (chosen >= start) & (chosen < start + p.numel())
            if inside.any():
                ids = inside.nonzero().flatten()
                groups.append((p, (chosen[ids] - start).to(p.device), ids))
            start += p.numel()
        return groups


class VoteCanaries(Canaries):
    """G-PATE's votes replaced by `pl_module.n_teachers` vote canaries (see the module docstring): DPGradAgg's
    vote counting is swapped for the canaries' for the length of the fit; its noise, threshold, answers and
    accounting run unchanged on their histograms."""

    def __init__(self, seed: int = 0):
        super().__init__(0, seed)

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if not hasattr(pl_module, "agg"):
            raise AuditError(f"vote canaries audit G-PATE; {type(pl_module).__name__} aggregates no teacher votes")
        self.m = pl_module.n_teachers
        self.included = torch.rand(self.m, generator=self.rng) < 0.5
        self.patterns = None
        self.original = dpgradagg.vote_histograms, dpgradagg.confident_gnmax
        dpgradagg.vote_histograms, dpgradagg.confident_gnmax = self.votes, self.answers

    def votes(self, projected: torch.Tensor, clip: float, bins: int) -> torch.Tensor:
        """(queries, bins) counts of the canaries' votes (the teachers' `projected` gradients are not used)."""
        queries = projected.shape[1]
        self.patterns = torch.randint(bins, (self.m, queries), generator=self.rng)
        cast = torch.where(self.included[:, None], self.patterns,
                           torch.randint(bins, (self.m, queries), generator=self.rng))
        counts = torch.zeros(queries, bins, dtype=torch.long)
        return counts.scatter_add_(1, cast.T, torch.ones_like(cast.T)).to(projected.device)

    def answers(self, votes: torch.Tensor, n_teachers: int, p, generator=None):
        answered, chosen = self.original[1](votes, n_teachers, p, generator)
        hits = answered.cpu()[None, :] & (chosen.cpu()[None, :] == self.patterns)
        self.rows.append(hits.sum(1).float())
        return answered, chosen

    def on_fit_end(self, trainer, pl_module) -> None:
        self.teardown(trainer, pl_module, "fit")
        super().on_fit_end(trainer, pl_module)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        """DPGradAgg's own vote counting back, also after a failed fit."""
        if getattr(self, "original", None):
            dpgradagg.vote_histograms, dpgradagg.confident_gnmax = self.original
            self.original = None
