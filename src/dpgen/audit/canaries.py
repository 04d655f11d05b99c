"""Canaries inside a real training run, scored from what the run releases (white-box, Steinke, Nasr &
Jagielski 2023): m canaries, each included by a fair coin of the auditor, and one row of m observations per
release (each step's, or DP-MERF's one release before training); after the run, `scores` sums the rows up to
the first step the privacy budget rolled back (a rolled-back step released nothing).

- `GradientCanaries` (DP-GAN, DP-CGAN; Sec. 6): canary i is a record whose clipped gradient is C e_j(i), one
  coordinate of the discriminator's parameters. An included canary joins each Poisson batch with the run's
  sampling rate q, as every record does, so the run's (eps, delta) claim covers each canary. Observed: every
  privatized gradient sum (Opacus' `p.grad` right after the noise, what DP-SGD releases at each step).
- `GuideCanaries` (DP-MERF's guide): the same gradient canaries in the guide's DP-SGD steps (every step released).
- `VoteCanaries` (G-PATE): the N teachers' votes are replaced by N canary teachers, the worst case of one record
  (which may decide every vote of its teacher). An included canary votes its secret bin b_iq on every query q,
  an excluded one a fresh random bin. Observed: each query's answer (answered or not, the chosen bin).
- `EmbeddingCanaries` (DP-MERF): canary i is Delta e_j(i), Delta = sqrt(1 + a^2) the release's sensitivity, on
  coordinate j(i) of the class-conditional feature sums S (K x (D + 1)), a coordinate of its own. The Gaussian
  mechanism's noise is isotropic, so a neighbour is as distinguishable as its difference's L2 norm, and every
  record's v(x, y) has norm Delta: a Dirac of norm Delta is exactly a worst-case record, and on its own coordinate
  it does not interfere with the other canaries. Included canaries are added to the clean sums before the noise.
  Observed: the one release S + noise, less the clean sums (which a white-box auditor knows) at each canary's
  coordinate.
"""
from __future__ import annotations

import lightning.pytorch as pl
import torch

from dpgen.aggregation import dpgradagg, mean_embedding
from dpgen.methods.dpmerf import DPMERF


class AuditError(ValueError):
    """An audit that cannot run as asked (shown as one error line)."""


class Canaries(pl.Callback):
    """What all kinds share: the coins, one observation row per release, the scores over accepted steps, and the
    functions a kind swaps for its own for the length of the fit (put back at its end, or when it fails)."""

    def __init__(self, canaries: int, seed: int):
        self.m = int(canaries)
        self.rng = torch.Generator().manual_seed(seed)  # the auditor's own coins: independent of the run
        self.included = torch.rand(self.m, generator=self.rng) < 0.5
        self.rows: list[torch.Tensor] = []  # one row of m observations per release
        self.step_starts: list[int] = []  # len(rows) when each training step began
        self.scores: torch.Tensor | None = None
        self.releases = 0
        self.swapped: list[tuple[object, str, object]] = []

    def swap(self, owner, name: str, replacement):
        """owner.name = replacement until `restore`; returns the original."""
        original = getattr(owner, name)
        self.swapped.append((owner, name, original))
        setattr(owner, name, replacement)
        return original

    def restore(self) -> None:
        while self.swapped:
            owner, name, original = self.swapped.pop()
            setattr(owner, name, original)

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.restore()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.restore()  # Lightning skips `teardown` after a failed fit

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
        data = pl_module.trainer.datamodule.train_data
        self.watch(opt, float(pl_module.sample_rate),
                   self.quiet_coordinates(opt, data, pl_module.device,
                                          lambda x, y: pl_module.real_loss(pl_module.net_d(x, y)).backward()))

    def watch(self, opt, rate: float, coordinates) -> None:
        """From now on each of `opt`'s steps adds C e_j(i) for every included canary i that its Poisson draw at
        `rate` samples, before the noise, and records the privatized sums at the canaries' coordinates."""
        self.clip, self.rate, self.coordinates = float(opt.max_grad_norm), float(rate), coordinates
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

    def quiet_coordinates(self, opt, data, device, backward) -> list[tuple[torch.nn.Parameter, torch.Tensor,
                                                                              torch.Tensor]]:
        """The m coordinates whose largest per-record gradient over the training records (the first
        `probe_records`, in batches; `backward(x, y)` back-propagates their private loss) is smallest, ties broken
        at random, grouped by parameter: (parameter, flat indices, canary ids)."""
        activity = None
        for start in range(0, min(len(data), self.probe_records), 256):
            x, y = (t.to(device) for t in data[torch.arange(start, min(start + 256, len(data)))])
            opt.zero_grad(set_to_none=True)
            backward(x, y)
            batch = torch.cat([p.grad_sample.abs().flatten(1).amax(0).float().cpu() for p in opt.params])
            activity = batch if activity is None else torch.maximum(activity, batch)
        opt.zero_grad(set_to_none=True)
        if activity.numel() < self.m:
            raise AuditError(f"{self.m} canaries need as many parameters of the DP-SGD net; it has "
                             f"{activity.numel()}")
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


class GuideCanaries(GradientCanaries):
    """Dirac gradient canaries in the DP-SGD steps of DP-MERF's guide (method.module.guide), as GradientCanaries on
    the guide's parameters. The guide is trained whole at fit start, before the generator's first step, so every
    one of its steps is released and scored; the claim it is held to is the run's (release and guide together)."""

    def on_fit_start(self, trainer, pl_module) -> None:  # before the module's, which trains the guide
        if not isinstance(pl_module, DPMERF) or pl_module.guide_spec is None:
            raise AuditError("guide canaries audit the DP-SGD guide of method=dpmerf with method.module.guide set")
        data = trainer.datamodule.train_data

        def install(opt, net, rate):
            loss = torch.nn.functional.cross_entropy
            self.watch(opt, rate, self.quiet_coordinates(
                opt, data, pl_module.device, lambda x, y: loss(net(x), y, reduction="sum").backward()))

        self.swap(pl_module, "guide_optimizer_hook", install)

    def on_train_start(self, trainer, pl_module) -> None:
        Canaries.on_train_start(self, trainer, pl_module)
        if not self.rows:
            raise AuditError("the canaries saw no DP-SGD step of the guide")

    def on_fit_end(self, trainer, pl_module) -> None:
        self.scores, self.releases = torch.stack(self.rows).sum(0), len(self.rows)


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
        self.swap(dpgradagg, "vote_histograms", self.votes)
        self.original_answers = self.swap(dpgradagg, "confident_gnmax", self.answers)

    def votes(self, projected: torch.Tensor, clip: float, bins: int) -> torch.Tensor:
        """(queries, bins) counts of the canaries' votes (the teachers' `projected` gradients are not used)."""
        queries = projected.shape[1]
        self.patterns = torch.randint(bins, (self.m, queries), generator=self.rng)
        cast = torch.where(self.included[:, None], self.patterns,
                           torch.randint(bins, (self.m, queries), generator=self.rng))
        counts = torch.zeros(queries, bins, dtype=torch.long)
        return counts.scatter_add_(1, cast.T, torch.ones_like(cast.T)).to(projected.device)

    def answers(self, votes: torch.Tensor, n_teachers: int, p, generator=None):
        answered, chosen = self.original_answers(votes, n_teachers, p, generator)
        hits = answered.cpu()[None, :] & (chosen.cpu()[None, :] == self.patterns)
        self.rows.append(hits.sum(1).float())
        return answered, chosen


class EmbeddingCanaries(Canaries):
    """`canaries` embedding canaries in DP-MERF's one release (see the module docstring). For the length of the
    fit, mean_embedding's `embedding_sums` returns the clean sums plus the included canaries (coordinates drawn
    once, distinct, from the auditor's generator) and its `release` keeps the canaries' scores; the noise, its
    sigma and the accounting run unchanged."""

    def __init__(self, canaries: int = 1000, seed: int = 0):
        super().__init__(canaries, seed)

    def on_fit_start(self, trainer, pl_module) -> None:  # before the module's, which makes the release
        if not isinstance(pl_module, DPMERF):
            raise AuditError(f"embedding canaries audit DP-MERF's release; {type(pl_module).__name__} makes none")
        self.norm = pl_module.sensitivity
        self.original_sums = self.swap(mean_embedding, "embedding_sums", self.sums_with_canaries)
        self.original_release = self.swap(mean_embedding, "release", self.scored_release)

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        if not self.rows:
            raise AuditError("the canaries saw no release: DP-MERF's release no longer goes through "
                             "mean_embedding.release")

    def sums_with_canaries(self, *args, **kwargs) -> torch.Tensor:
        self.clean = self.original_sums(*args, **kwargs)
        if self.m > self.clean.numel():
            raise AuditError(f"{self.m} embedding canaries need as many coordinates of the released sums; they have "
                             f"{self.clean.numel()} (K x (D + 1))")
        self.coordinates = torch.randperm(self.clean.numel(), generator=self.rng)[:self.m].to(self.clean.device)
        canaries = torch.zeros(self.clean.numel(), dtype=self.clean.dtype, device=self.clean.device)
        canaries[self.coordinates] = self.norm * self.included.to(canaries)
        return self.clean + canaries.view_as(self.clean)

    def scored_release(self, *args, **kwargs) -> mean_embedding.EmbeddingRelease:
        out = self.original_release(*args, **kwargs)
        self.rows.append((out.sums - self.clean).reshape(-1)[self.coordinates].float().cpu())
        return out
