"""G-PATE (NeurIPS 2021): a student generator taught by an ensemble of teacher discriminators through DPGradAgg."""
from __future__ import annotations

import dataclasses
import logging
import math
from functools import partial

import numpy as np
import torch
from torch.nn.functional import mse_loss

from dpgen.aggregation.dpgradagg import DPGradAggParams, aggregate, draw_projection, from_lead, project, step_cost
from dpgen.aggregation.noise import secret_generator
from dpgen.callbacks.checkpoint_io import CheckpointError
from dpgen.distributed import process_rank, teacher_slice
from dpgen.methods.base import PrivateGenerator
from dpgen.nn.ensemble import TeacherEnsemble
from dpgen.nn.generator import label_pool
from dpgen.privacy import laplace
from dpgen.privacy.ledger import PrivacyLedger
from dpgen.privacy.rdp import DEFAULT_ORDERS

log = logging.getLogger(__name__)
CLASS_RATIO = "laplace_class_ratio"
CLASS_PROBS_KEY = "gpate_class_probs"
CLASS_RATIO_SENSITIVITY = 1.0  # L1 change of a class histogram when one record is added or removed
PROCESSES_KEY = "gpate_teacher_processes"


class GPATE(PrivateGenerator):
    """G-PATE Algorithm 1. Per iteration: one fake batch G(z, y) shared by all teachers; every teacher takes
    one Adam step on its own partition's batch against it; each teacher's gradient of its generator loss
    w.r.t. every fake sample goes through DPGradAgg (Algorithm 2); the generator takes one Adam step on the
    MSE between G(z) and G(z) + the private gradient (equation 2).

    `class_ratio_epsilon`: G-PATE section 6.2 "Kaggle Credit" two-step approach: once, before training, the
    training set's class counts are released with the Laplace mechanism at this epsilon; fake labels in
    training and in `sample()` then follow the noisy ratio, and the generator trains with the rest of the
    budget (the release is in the ledger). None: balanced labels, no release.

    `aggregator.smooth` and `teachers.pool` (dpgen options beyond the paper, on in the CPU-sized default) shape
    image directions and image pooling; for tables they do not apply and are ignored, with a log line.

    `label_matched_fakes` (the reference code's teacher step, where one label placeholder feeds both the
    teacher's real batch and the generator): teacher t trains against fakes G(z_j, y_tj) drawn with its own
    real labels y_t, taken from one pool G(z_j, c) for every j < b and class c (one BatchNorm batch of b x K;
    teacher t still sees only its own partition). The gradient query stays on G(z, random labels). False:
    every teacher trains against the query batch itself.

    `sample_batch_norm = b`: `sample()` and generate.py use the generator's BatchNorm on the statistics of
    batches of b samples, as the reference code generates its released data; None: running statistics.

    Under torchrun (`trainer=ddp`, dpgen/distributed.py) each process holds a contiguous slice of the teachers
    and votes with it; the fake batch and the privacy noise come from process 0, and every process ends each step
    with the same generator and ledger."""

    neighbouring = "add_remove"

    private_modules = ("ensemble",)  # trained on their own partitions and public inputs only
    process_split = True  # each process its slice of the teachers (dpgen/distributed.py)

    def __init__(self, shape, num_classes, kind, n_teachers: int, z_dim: int = 100, lr: float = 1e-3,
                 beta1: float = 0.5, aggregator: dict | None = None, teachers: dict | None = None,
                 generator: dict | None = None, class_probs=None, class_ratio_epsilon: float | None = None,
                 label_matched_fakes: bool = False, sample_batch_norm: int | None = None, seed: int = 0):
        if class_ratio_epsilon is not None and class_probs is not None:
            raise ValueError("give class_probs (public) or class_ratio_epsilon (released privately), not both")
        if class_ratio_epsilon is not None and not class_ratio_epsilon > 0:
            raise ValueError(f"class_ratio_epsilon must be > 0 or None, got {class_ratio_epsilon}")
        super().__init__(shape, num_classes, kind, z_dim=z_dim, generator=generator, class_probs=class_probs)
        self.lr, self.beta1, self.n_teachers = lr, beta1, int(n_teachers)
        self.class_ratio_epsilon, self.label_matched_fakes = class_ratio_epsilon, bool(label_matched_fakes)
        if sample_batch_norm is not None and not int(sample_batch_norm) >= 2:
            raise ValueError(f"sample_batch_norm must be a batch size >= 2 or None, got {sample_batch_norm}")
        self.sample_batch_norm = None if sample_batch_norm is None else int(sample_batch_norm)
        self.agg = DPGradAggParams(**(aggregator or {}))
        teachers = dict(teachers or {})
        if len(self.shape) != 3 and (self.agg.smooth is not None or teachers.get("pool", 1) != 1):
            log.info("aggregator.smooth and teachers.pool apply to images; ignored for data of shape %s", self.shape)
            self.agg = dataclasses.replace(self.agg, smooth=None)
            teachers["pool"] = 1
        rank, self.world_size = process_rank()
        first, count = teacher_slice(self.n_teachers, rank, self.world_size)
        self.teacher_rows = slice(first, first + count)  # this process's teachers, rows of every teacher batch
        self.ensemble = TeacherEnsemble(count, self.shape, self.num_classes, seed=seed, first=first, **teachers)
        # each process's teachers are its own: DDP neither broadcasts them from process 0 nor compares them
        self._ddp_params_and_buffers_to_ignore = [f"ensemble.{name}" for name, _ in self.ensemble.named_buffers()]
        self.orders = np.asarray(DEFAULT_ORDERS, dtype=float)
        self.ledger = PrivacyLedger(self.orders)
        self.fake_batch = None  # per-teacher real batch size b: from the datamodule at fit start, else the first batch
        self._step_costs = {}  # b -> StepCost
        self.noise = None  # secret randomness of DPGradAgg (aggregation/noise.py), made on the training device

    def configure_optimizers(self):
        return torch.optim.Adam(self.net_g.parameters(), lr=self.lr, betas=(self.beta1, 0.999))

    def queries_per_step(self, batch: int) -> int:
        """b * k Confident-GNMax queries per iteration (k = dim without projection)."""
        return batch * self.agg.queries_per_sample(math.prod(self.shape))

    def step_cost(self):
        if self.fake_batch is None:
            return None
        # Worst case known in advance; the data-dependent cost is known after the step (PrivacyBudget rolls back).
        b = self.fake_batch
        if b not in self._step_costs:  # its best case tries every top vote: computed once per b
            self._step_costs[b] = step_cost(self.agg, self.n_teachers, self.queries_per_step(b), self.orders,
                                            self.class_ratio_epsilon)
        return self._step_costs[b]

    def on_fit_start(self) -> None:
        # Runs after a checkpoint is restored (ledger and class_probs included), so a resumed run never releases
        # the ratio again; and before PrivacyBudget's first snapshot (on_train_start), so a rollback keeps it.
        dm = getattr(self.trainer, "datamodule", None)
        if dm is not None and getattr(dm, "n_teachers", 1) == self.n_teachers:
            self.fake_batch = dm.batch_size  # the teachers' batch b, public (data/partition.py)
        if self.class_ratio_epsilon is not None and self.class_probs is None:
            if dm is None or getattr(dm, "train_data", None) is None:
                raise ValueError("class_ratio_epsilon needs the training labels: fit with a dpgen datamodule")
            self.release_class_ratio(dm.train_data.y)

    def release_class_ratio(self, labels: torch.Tensor) -> None:
        """G-PATE section 6.2 (Kaggle Credit, step one): class counts + Lap(1 / eps) each. A record added or
        removed moves one count by one (L1 sensitivity 1, the relation of every dpgen method: docs/PRIVACY.md),
        so the histogram is eps-DP (Dwork & Roth 2014, Thm. 3.6), recorded with its exact RDP. Counts are
        floored at 1 (post-processing) so every class stays possible, then normalised."""
        counts = torch.bincount(labels.long().cpu(), minlength=self.num_classes).double().numpy()
        rng = np.random.default_rng(secret_generator().initial_seed())  # OS entropy (aggregation/noise.py)
        noisy = laplace.release(counts, CLASS_RATIO_SENSITIVITY, self.class_ratio_epsilon, rng)
        probs = np.maximum(noisy, 1.0) / np.maximum(noisy, 1.0).sum()
        self.class_probs = torch.as_tensor(probs, dtype=torch.float)
        self.ledger.record(CLASS_RATIO, {"data_independent": laplace.rdp_laplace(self.class_ratio_epsilon,
                                                                                 self.orders)},
                           count=1, params={"epsilon": self.class_ratio_epsilon, "sensitivity": CLASS_RATIO_SENSITIVITY,
                                            "scale": CLASS_RATIO_SENSITIVITY / self.class_ratio_epsilon,
                                            "class_probs": [float(p) for p in probs]})

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def on_save_checkpoint(self, checkpoint):
        checkpoint[CLASS_PROBS_KEY] = None if self.class_probs is None else self.class_probs.tolist()
        checkpoint[PROCESSES_KEY] = self.world_size

    def on_load_checkpoint(self, checkpoint):
        saved = checkpoint.get(PROCESSES_KEY, 1)
        if saved != self.world_size:
            raise CheckpointError(f"this checkpoint holds the teachers of {saved} process(es), one file each; resume "
                                  f"it with {saved} (torchrun --nproc_per_node), not {self.world_size}")
        if checkpoint.get(CLASS_PROBS_KEY) is not None:
            self.class_probs = torch.as_tensor(checkpoint[CLASS_PROBS_KEY], dtype=torch.float)

    def training_step(self, batch, batch_idx):
        real_x, real_y = batch  # (teachers, b, *shape), each row from that teacher's partition only
        real_x, real_y = real_x[self.teacher_rows], real_y[self.teacher_rows]  # this process's teachers
        b = real_x.shape[1]
        self.fake_batch = b
        if self.distributed and not torch.distributed.is_initialized():
            raise RuntimeError(f"the teachers are split over {self.world_size} processes (WORLD_SIZE): train with "
                               f"trainer=ddp under torchrun")
        fake_y = from_lead(self.random_labels(b), self.distributed)  # uniform, or the released noisy class ratio
        z = from_lead(self.latent(b), self.distributed)
        fake = self.net_g(z, fake_y)
        if self.label_matched_fakes:
            pool = label_pool(self.net_g, z, self.num_classes)
            d_loss = self.ensemble.train_step(real_x, real_y, pool, real_y, by_label=True)
        else:
            d_loss = self.ensemble.train_step(real_x, real_y, fake.detach(), fake_y)
        if self.noise is None or self.noise.device != self.ensemble.device:
            self.noise = secret_generator(self.ensemble.device)
        # Algorithm 2 line 3, drawn before the teachers' gradients so that each chunk of teachers is projected
        # as soon as its gradients exist (line 4): all teachers' full gradients are never held at once
        proj = draw_projection(b, self.shape, self.agg, self.noise, self.ensemble.dtype, self.ensemble.device,
                               self.distributed)
        # Delta x = dL_D/dx (equation 1): minus the gradient of the generator loss BCE(D(x), 1), i.e. the
        # direction that makes the fake look more real to each teacher (the reference negates it too); projected
        # (linear), so the negation applies to the projected coordinates.
        projected = self.ensemble.input_grads(fake.detach(), fake_y, real_x, real_y,
                                              transform=partial(project, proj=proj)).neg_()
        private, release = aggregate(projected, proj, self.agg, self.orders, self.noise, distributed=self.distributed)
        self.ledger.record("confident_gnmax", release.rdp, count=len(release.answered),
                           params={"sigma1": self.agg.sigma1, "sigma2": self.agg.sigma2,
                                   "threshold": self.agg.threshold * self.n_teachers,
                                   "n_teachers": self.n_teachers})
        target = (fake + private.view_as(fake)).detach()  # x_hat = G(z) + x_priv (Algorithm 1 line 16)
        # Equation 2 as the reference computes it: a SUM of squares. A mean over b*784 elements makes the
        # weight gradients ~1e-9, the size of Adam's epsilon, which all but stops the generator.
        g_loss = mse_loss(fake, target, reduction="sum")
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(g_loss)
        opt.step()
        self.log_losses({"loss/g": g_loss.detach(), "answered": float(release.answered.mean())},
                        private={"loss/d_teachers": d_loss.mean()})
