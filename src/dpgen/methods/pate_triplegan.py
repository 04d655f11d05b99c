"""PATE-TripleGAN (PATE-TripleGAN paper, section 4): generator, classifier and student discriminator in a
Triple-GAN game; teachers judge real / fake "data-label" pairs on disjoint partitions of the labelled data.

Data. The datamodule splits the training set into round(n_teachers / percent) fixed disjoint partitions
(its `n_teachers`, the config's top-level value): the first `n_teachers` partitions are the labelled data, one
per teacher, the others the unlabelled data, whose labels are never read. Each Lightning batch is the
datamodule's teacher batch; row t < n_teachers (teacher t's own partition only) is split into
`teacher_steps` chunks. The DP-SGD batches are Poisson samples of all N records, drawn here (as DP-GAN does), at
rate `dpsgd_batch_size` / N (`batch_size` unless set: the paper uses one batch size for both).

Per generator iteration: `teacher_steps` teacher steps (own labelled pairs real, generator pairs fake, eq. 9);
`student_steps` student steps of the hybrid desensitization (section 4.3): (a) `batch_size` generator pairs
labelled by Confident-GNMax votes of the teachers, learned where answered, weight 1 - alpha (eq. 12); (b) a
Poisson batch (rate dpsgd_batch_size / N) of private records paired with the classifier's label, learned with
DP-SGD (Opacus: per-record clip, Gaussian noise), weight alpha (eq. 11); then one classifier step and one
generator step. Every release is recorded before the step's result is kept, and `step_cost()` gives
the data-independent worst case (all queries answered), so the budget stops before it is exceeded.

The generator pairs' term enters the student's DP-SGD step as `gen_pairs` says: "public" (the paper: its
gradient added unclipped after Opacus has clipped and noised the records' term) or "clipped" (each answered
generator pair clipped to C like each record; their sum over the queries joins the records' clipped, noised sum
over the expected DP-SGD batch, both averages as in Triple-GAN's loss). The pairs and their labels are public once
the votes are released, so neither changes the privacy argument; clipping only the records' term lets the
unclipped "fake" term dominate the student, the fault DP-GAN's `fake_term` names (methods/dpgan.py).

Two deliberate deviations, both to keep DP-SGD's per-record sensitivity true (docs/methods/pate_triplegan.md):
  - the target of a classifier pair is decided by its own record (`pair_target`): "agree", real iff the record
    is labelled and the classifier agrees with its label, as a teacher that knew the label would vote; or
    "labelled", real iff the record is labelled, as the teachers vote on real images while the generator's are
    still unlike them; fake otherwise (Triple-GAN's "classifier pairs are fake"). Or "own_label": a labelled
    record is paired with its own label and real, an unlabelled one with the classifier's label and fake, as
    Triple-GAN's discriminator sees the labelled data and the classifier's pairs. The paper's noiseless teacher
    vote would make every record's gradient depend on a whole teacher partition, which the per-record clipping
    does not bound.
  - the classifier learns only from generator pairs (Triple-GAN's pseudo-discriminative loss R_P). Learning
    from labelled or unlabelled private records directly would make its label of one record depend on other
    records, outside DP-SGD's accounting.
"""
from __future__ import annotations

import torch
from opacus import GradSampleModule
from opacus.optimizers import DPOptimizer
from torch import nn
from torch.nn.functional import binary_cross_entropy_with_logits as bce
from torch.nn.functional import cross_entropy
from torch.utils.data import TensorDataset

from dpgen.aggregation import hybrid
from dpgen.aggregation.noise import secret_generator
from dpgen.methods.base import PrivateGenerator
from dpgen.methods.dpsgd_parts import (PoissonBatches, clipped_public_sum, dp_optimizer, opacus_ready,
                                       private_step_with, public_term, secret_noise)
from dpgen.nn.classifier import CNNClassifier
from dpgen.nn.ensemble import TeacherEnsemble
from dpgen.privacy.ledger import NO_DATA_DEPENDENT_BOUND, PrivacyLedger
from dpgen.privacy.rdp import DEFAULT_ORDERS


GEN_PAIRS = ("public", "clipped")
PAIR_TARGETS = ("agree", "labelled", "own_label")


class PATETripleGAN(PrivateGenerator):
    """percent: labelled fraction; alpha: Triple-GAN's weight of classifier pairs in the student's loss;
    sigma1 / sigma2 / threshold: Confident-GNMax; noise_multiplier / max_grad_norm: DP-SGD on classifier
    pairs, on Poisson batches of `dpsgd_batch_size` expected records (None: `batch_size`); accounting: "rdp" (a
    bound) or "clt" (the paper's asymptotic mu) for the DP-SGD part; vote_charge: "answered" (the paper) or
    "every" query's GNMax charged (hybrid.VOTE_CHARGES); gen_pairs: how the generator pairs' term enters the
    student's DP-SGD step (GEN_PAIRS); pair_target: which classifier pairs are real (PAIR_TARGETS); both in the
    module docstring."""

    neighbouring = "add_remove"

    private_modules = ("ensemble",)  # trained on their own partitions and public inputs only

    def __init__(self, shape, num_classes, kind, n_teachers: int = 100, percent: float = 0.8,
                 batch_size: int = 128, dpsgd_batch_size: int | None = None, teacher_steps: int = 1,
                 student_steps: int = 1, alpha: float = 0.5,
                 sigma1: float = 300.0, sigma2: float = 300.0, threshold: float = 0.5,
                 noise_multiplier: float = 0.4, max_grad_norm: float = 1.0, accounting: str = "rdp",
                 vote_charge: str = "every", gen_pairs: str = "clipped",
                 pair_target: str = "own_label",
                 z_dim: int = 100, lr: float = 2e-4, beta1: float = 0.5, generator: dict | None = None,
                 student: dict | None = None, classifier: dict | None = None, teachers: dict | None = None,
                 class_probs=None, ema_decay: float = 0.0, seed: int = 0):
        super().__init__(shape, num_classes, kind, z_dim=z_dim, generator=generator, class_probs=class_probs,
                         ema_decay=ema_decay)
        if not 0 < percent <= 1:
            raise ValueError(f"percent must be in (0, 1], got {percent}")
        if not 0 <= alpha <= 1:
            raise ValueError(f"alpha must be in [0, 1], got {alpha}")
        if gen_pairs not in GEN_PAIRS:
            raise ValueError(f"unknown gen_pairs {gen_pairs!r} (one of {GEN_PAIRS})")
        if pair_target not in PAIR_TARGETS:
            raise ValueError(f"unknown pair_target {pair_target!r} (one of {PAIR_TARGETS})")
        self.gen_pairs, self.pair_target = gen_pairs, pair_target
        self.n_teachers, self.percent = int(n_teachers), float(percent)
        self.batch_size, self.teacher_steps, self.student_steps = int(batch_size), int(teacher_steps), int(student_steps)
        self.dpsgd_batch_size = int(batch_size if dpsgd_batch_size is None else dpsgd_batch_size)
        if self.dpsgd_batch_size < 1:
            raise ValueError(f"dpsgd_batch_size must be a positive record count, got {dpsgd_batch_size}")
        self.alpha, self.max_grad_norm, self.lr, self.beta1 = float(alpha), float(max_grad_norm), lr, beta1
        self.hybrid = hybrid.HybridParams(sigma1, sigma2, threshold, noise_multiplier, accounting, vote_charge)
        self.student = GradSampleModule(opacus_ready(self.build_judge("leaky_relu", **(student or {}))),
                                        loss_reduction="sum")
        self.classifier = self.build_classifier(**(classifier or {}))
        self.ensemble = TeacherEnsemble(self.n_teachers, self.shape, self.num_classes, seed=seed,
                                        **{"lr": lr, "betas": (beta1, 0.999), **(teachers or {})})
        self.orders = DEFAULT_ORDERS
        self.ledger = PrivacyLedger(self.orders, aliases=NO_DATA_DEPENDENT_BOUND)
        self.sample_rate: float | None = None
        self.dp_optimizer: DPOptimizer | None = None
        self.data = self.labelled = None
        self.poisson: PoissonBatches | None = None
        self.noise = None

    # nets

    def build_classifier(self, **arch) -> nn.Module:
        if self.kind == "image":
            channels, height, width = self.shape
            return CNNClassifier(channels, self.num_classes, (height, width), **arch)
        (features,) = self.shape
        hidden = int(arch.get("hidden", 2 * features))
        return nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, self.num_classes))

    def configure_optimizers(self):
        betas = (self.beta1, 0.999)
        opt_g = torch.optim.Adam(self.net_g.parameters(), lr=self.lr, betas=betas)
        opt_c = torch.optim.Adam(self.classifier.parameters(), lr=self.lr, betas=betas)
        self.dp_optimizer = dp_optimizer(torch.optim.Adam(self.student.parameters(), lr=self.lr, betas=betas),
                                         self.hybrid.noise_multiplier, self.max_grad_norm, self.dpsgd_batch_size)
        return opt_g, opt_c, self.dp_optimizer

    # data and privacy

    def partitions_needed(self) -> int:
        return round(self.n_teachers / self.percent)

    def setup(self, stage: str) -> None:
        if stage != "fit" or self.data is not None:
            return
        dm = self.trainer.datamodule
        if dm.n_teachers != self.partitions_needed():
            raise ValueError(f"percent={self.percent} with {self.n_teachers} teachers needs the datamodule split into "
                             f"{self.partitions_needed()} partitions (method.n_teachers), got {dm.n_teachers}")
        self.data = dm.train_data
        self.labelled = torch.zeros(len(self.data), dtype=torch.bool)
        self.labelled[torch.cat(dm.partitions[:self.n_teachers])] = True  # by a keyed hash of each record alone
        self.sample_rate = min(1.0, self.dpsgd_batch_size / len(self.data))  # N is public

    def on_train_start(self) -> None:
        """Secret Poisson sampling and vote / DP-SGD noise from the OS's entropy, fresh on resume."""
        self.poisson = PoissonBatches(TensorDataset(torch.arange(len(self.data))), self.sample_rate)
        self.noise = secret_generator(self.device)
        secret_noise(self.dp_optimizer, self.device)

    @property
    def pld_ready(self) -> bool:
        """Votes are Gaussians; the DP-SGD part has a PLD event unless accounted by the central-limit mu. With
        vote_charge="answered" the number of charged GNMax releases is itself an outcome of the checks, and no
        proof covers a PLD composition of an adaptively chosen count (docs/methods/pate_triplegan.md): refused."""
        return self.hybrid.accounting == "rdp" and self.hybrid.vote_charge == "every"

    def step_cost(self):
        if self.sample_rate is None:
            return None
        return hybrid.step_cost(self.hybrid, self.student_steps * self.batch_size, self.student_steps,
                                self.sample_rate, self.orders)

    def private_batch(self):
        """Poisson batch of record indices (possibly empty) over all N records."""
        idx = self.poisson.next()[0].long()
        x, y = self.data[idx]
        return x.to(self.device), y.to(self.device), self.labelled[idx].to(self.device)

    # training

    def judge(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The student discriminator's logit (n,) for data-label pairs."""
        return self.student(x, y).view(-1)

    def teacher_step(self, real_x: torch.Tensor, real_y: torch.Tensor) -> torch.Tensor:
        """Equation 9: each teacher's own labelled pairs are real, one batch of generator pairs is fake."""
        with torch.no_grad():
            fake, fake_y = self.generated(real_x.shape[1])
        return self.ensemble.train_step(real_x, real_y, fake, fake_y).mean()

    def student_step(self) -> tuple[torch.Tensor, float, float]:
        """Returns the student's loss, the share of queries answered and the share of answers that say real."""
        # (a) generator pairs: Confident-GNMax labels, released and charged; public given them
        with torch.no_grad():
            u, uy = self.generated(self.batch_size)
        release = hybrid.noisy_vote(self.ensemble.predict_logits(u, uy), self.hybrid, self.noise)
        hybrid.record(self.ledger, self.hybrid, release, self.sample_rate)
        keep = torch.as_tensor(release.answered, device=self.device)
        target = torch.as_tensor(release.labels, dtype=u.dtype, device=self.device)[keep]
        # (b) classifier pairs: each record judged by itself, then DP-SGD (clip per record, noise)
        x, y, labelled = self.private_batch()
        with torch.no_grad():
            yc = self.classifier(x).argmax(1) if len(x) else y
        real = (labelled & (yc == y) if self.pair_target == "agree" else labelled).to(x.dtype)
        pair_y = torch.where(labelled, y, yc) if self.pair_target == "own_label" else yc
        opt = self.dp_optimizer
        opt.zero_grad()
        if self.gen_pairs == "clipped":  # each generator pair and each record clipped to C
            # Triple-GAN's loss is a weighted sum of averages: the answered pairs' clipped sum over the queries,
            # the records' clipped, noised sum over the expected DP-SGD batch (Opacus); with one batch size for
            # both, as the paper, this is one Opacus step over pairs and records
            gen_loss, gen_grads = torch.zeros((), device=self.device), []
            if keep.any():
                losses = (1 - self.alpha) * bce(self.judge(u[keep], uy[keep]), target, reduction="none")
                gen_loss = losses.detach().mean()
                gen_grads = [g / self.batch_size for g in clipped_public_sum(self.student, losses, self.max_grad_norm)]
        else:  # the generator pairs' term is public given the votes: plain gradients, no per-sample work
            gen_loss, gen_grads = public_term(self.student, lambda: (1 - self.alpha) * (
                bce(self.judge(u[keep], uy[keep]), target) if keep.any() else u.sum() * 0))
        cls_loss = self.alpha * bce(self.judge(x, pair_y), real, reduction="sum")
        self.manual_backward(cls_loss)
        private_step_with(opt, self.student, gen_grads)
        voted_real = float(target.mean()) if len(target) else 0.0
        return (cls_loss / self.dpsgd_batch_size + gen_loss).detach(), float(keep.float().mean()), voted_real

    def classifier_step(self) -> torch.Tensor:
        """Triple-GAN's R_P: the classifier learns the generator's pairs (post-processing of released state)."""
        with torch.no_grad():
            x, y = self.generated(self.batch_size)
        loss = cross_entropy(self.classifier(x), y)
        opt = self.optimizers()[1]
        opt.zero_grad()
        self.manual_backward(loss)
        opt.optimizer.step()
        return loss.detach()

    def generator_step(self) -> torch.Tensor:
        return self.generator_step_against(self.student, lambda s: (1 - self.alpha) * bce(s, torch.ones_like(s)),
                                           self.batch_size)

    def training_step(self, batch, batch_idx):
        real_x, real_y = batch[0][:self.n_teachers], batch[1][:self.n_teachers]  # the labelled partitions
        b = real_x.shape[1] // self.teacher_steps
        if b < 1:
            raise ValueError(f"teacher batch of {real_x.shape[1]} records cannot feed {self.teacher_steps} teacher "
                             "steps: raise method.batch_size")
        t_loss = torch.stack([self.teacher_step(real_x[:, i * b:(i + 1) * b], real_y[:, i * b:(i + 1) * b])
                              for i in range(self.teacher_steps)]).mean()
        d_losses, answered, real = zip(*(self.student_step() for _ in range(self.student_steps)))
        c_loss = self.classifier_step()
        g_loss = self.generator_step()
        # votes/answered, votes/real: shares of the generated pairs the released votes answer, and of the answers that
        # say real (public): with sigma 300 on 100 teachers they show how much the vote tells the student
        self.log_losses({"loss/classifier": c_loss, "loss/g": g_loss, "votes/answered": sum(answered) / len(answered),
                         "votes/real": sum(real) / len(real)},
                        # loss/student holds the student's DP-SGD batch term
                        private={"loss/teachers": t_loss, "loss/student": torch.stack(d_losses).mean()})
