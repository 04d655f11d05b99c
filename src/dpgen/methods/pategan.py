"""PATE-GAN (Jordon, Yoon & van der Schaar, ICLR 2019): a generator trained against a student discriminator
that learns only from generated samples labelled by the noisy vote of teacher discriminators.

Design. One Lightning step = one generator iteration of Algorithm 1. The datamodule runs with
`n_teachers = k` and yields teacher batches (k, B, ...) whose row t comes from teacher t's fixed partition
only (`TeacherBatchSampler`); B is split into `teacher_steps` chunks of b = B // teacher_steps records, one
per teacher step, so each teacher sees b fresh records of its own partition per step and nothing else.
This module never reads the training set itself: the teachers' only path to data is that batch.

Budget. Every labelled sample is one query recorded in the ledger (`laplace_pate`, count = samples).
`step_cost()` announces the data-independent worst case of the next step, so under
`privacy.bound=data_independent` PrivacyBudget stops before a step could exceed epsilon; under the
data-dependent bound the cost is known after the step and an overshooting step is rolled back (generator
and ledger), so no generator over budget is ever released.
"""
from __future__ import annotations

import torch
from torch.nn.functional import binary_cross_entropy_with_logits as bce

from dpgen.aggregation.pate_vote import laplace_vote_batch, secret_rng, step_cost
from dpgen.methods.base import PrivateGenerator
from dpgen.nn.ensemble import TeacherEnsemble
from dpgen.privacy.ledger import PrivacyLedger
from dpgen.privacy.rdp import DEFAULT_ORDERS

MECHANISM = "laplace_pate"


class PATEGAN(PrivateGenerator):
    """PATE-GAN Algorithm 1 with conditional nets (the one-hot label is an input of every net).

    lam: inverse scale of the Laplace vote noise (Lap(1 / lam) per count, PATE-GAN appendix Thm. 5).
    batch_size: n, the generated samples of each student step and of the generator step.
    teacher_steps, student_steps: n_T and n_S (5 and 5 in the paper's appendix).
    teacher_warmup: extra rounds of n_T teacher steps (on the first step's teacher batch, fresh fakes) before
        the first vote. Not in Algorithm 1; free under PATE, whose only release is the noisy vote (PATE-GAN
        section 3: the teachers' parameters are never published), and it lets the first votes be confident,
        hence cheap under the data-dependent bound. 0 = the paper.
    Each query asks whether a generated sample is real: each teacher votes real iff its logit is > 0 (eq. 3), the
    student learns the released labels and the generator learns -log S(G(z)).
    Tables: generator and student are depth-3 MLPs with hidden sizes d, d/2, d (appendix "Hyper-parameter
    Optimization"); images: the DCGAN-style conditional nets of G-PATE (appendix E).
    """

    neighbouring = "add_remove"

    private_modules = ("ensemble",)  # trained on their own partitions and public inputs only

    def __init__(self, shape, num_classes, kind, n_teachers: int, lam: float, batch_size: int = 64,
                 teacher_steps: int = 5, student_steps: int = 5, teacher_warmup: int = 0, z_dim: int = 100,
                 lr: float = 1e-4, beta1: float = 0.5, generator: dict | None = None, student: dict | None = None,
                 teachers: dict | None = None, class_probs=None, ema_decay: float = 0.0, seed: int = 0):
        if not lam > 0:
            raise ValueError(f"lam (inverse Laplace scale) must be > 0, got {lam}")
        if min(batch_size, teacher_steps, student_steps, n_teachers) < 1:
            raise ValueError("batch_size, teacher_steps, student_steps and n_teachers must be >= 1")
        if teacher_warmup < 0:
            raise ValueError(f"teacher_warmup must be >= 0, got {teacher_warmup}")
        super().__init__(shape, num_classes, kind, z_dim=z_dim, generator=generator, class_probs=class_probs,
                         ema_decay=ema_decay)
        self.n_teachers, self.lam = int(n_teachers), float(lam)
        self.batch_size, self.teacher_steps, self.student_steps = int(batch_size), int(teacher_steps), int(student_steps)
        self.teacher_warmup, self.lr, self.beta1 = int(teacher_warmup), lr, beta1
        self.student = self.build_judge("relu", **(student or {}))
        self.ensemble = TeacherEnsemble(self.n_teachers, self.shape, self.num_classes, seed=seed,
                                        **{"lr": lr, "betas": (beta1, 0.999), **(teachers or {})})
        self.orders = DEFAULT_ORDERS
        self.ledger = PrivacyLedger(self.orders)
        self._step_cost = None
        self.rng = None  # Laplace noise stream, from the OS's entropy at train start (fresh on resume)
        self.register_buffer("warmed_up", torch.tensor(self.teacher_warmup == 0))  # in checkpoints: once per run

    def configure_optimizers(self):
        betas = (self.beta1, 0.999)
        return (torch.optim.Adam(self.net_g.parameters(), lr=self.lr, betas=betas),
                torch.optim.Adam(self.student.parameters(), lr=self.lr, betas=betas))

    def queries_per_step(self) -> int:
        return self.student_steps * self.batch_size

    def step_cost(self):
        if self._step_cost is None:  # fixed by the parameters; its best case takes every vote, so it is kept
            self._step_cost = step_cost(self.lam, self.n_teachers, self.queries_per_step(), self.orders)
        return self._step_cost

    def on_train_start(self) -> None:
        self.rng = secret_rng()

    def on_load_checkpoint(self, checkpoint):
        # checkpoints from when the teachers could pause hold the last released share "real", unused since
        checkpoint["state_dict"].pop("last_real_share", None)

    def teacher_step(self, real_x: torch.Tensor, real_y: torch.Tensor) -> torch.Tensor:
        """Algorithm 1 lines 5-10: every teacher takes an Adam step on its own b records vs one fake batch."""
        with torch.no_grad():
            fake, fake_y = self.generated(real_x.shape[1])
        return self.ensemble.train_step(real_x, real_y, fake, fake_y)

    def student_step(self) -> tuple[torch.Tensor, float]:
        """Algorithm 1 lines 12-21: n queries on generated samples, answered by the noisy vote, charged, then
        learned. Returns the student's loss and the fraction of the released labels that say "real"."""
        with torch.no_grad():
            u, y = self.generated(self.batch_size)
            logits = self.ensemble.predict_logits(u, y)
        release = laplace_vote_batch(logits, self.lam, self.orders, self.rng)
        self.ledger.record(MECHANISM, release.rdp, count=release.count,
                           params={"lam": self.lam, "laplace_scale": 1.0 / self.lam, "n_teachers": self.n_teachers})
        target = torch.as_tensor(release.labels, dtype=u.dtype, device=u.device)
        loss = bce(self.student(u, y).view(-1), target)
        opt = self.optimizers()[1]
        opt.zero_grad()
        self.manual_backward(loss)
        opt.optimizer.step()  # the raw optimizer: global_step counts generator steps only
        return loss.detach(), float(release.labels.mean())

    def generator_step(self) -> torch.Tensor:
        """Algorithm 1 lines 22-24, with the non-saturating form -log S(G(z)) of eq. 5's log(1 - S(G(z)))."""
        return self.generator_step_against(self.student, lambda s: bce(s, torch.ones_like(s)), self.batch_size)

    def training_step(self, batch, batch_idx):
        real_x, real_y = batch  # (k, B, ...): row t from teacher t's partition only
        if real_x.shape[0] != self.n_teachers:
            raise ValueError(f"expected teacher batches of {self.n_teachers} rows, got {real_x.shape[0]}: "
                             "build the datamodule with n_teachers = method.n_teachers")
        b = real_x.shape[1] // self.teacher_steps
        if b < 1:
            raise ValueError(f"teacher batch of {real_x.shape[1]} records cannot feed {self.teacher_steps} teacher "
                             "steps: raise method.batch_size or use fewer teachers")
        chunks = [(real_x[:, i * b:(i + 1) * b], real_y[:, i * b:(i + 1) * b]) for i in range(self.teacher_steps)]
        if not bool(self.warmed_up):
            for _ in range(self.teacher_warmup):
                for x, y in chunks:
                    self.teacher_step(x, y)
            self.warmed_up.fill_(True)
        t_loss = torch.stack([self.teacher_step(x, y) for x, y in chunks]).mean()
        s_losses, released = zip(*(self.student_step() for _ in range(self.student_steps)))
        g_loss = self.generator_step()
        # votes/real: the share of generated samples the (noisy, released) vote calls real; the student learns
        # nothing the generator can use while it is 0 (PATE-GAN section 4.2.2)
        self.log_losses({"loss/student": torch.stack(s_losses).mean(), "loss/g": g_loss,
                         "votes/real": sum(released) / len(released)},
                        private={"loss/teachers": t_loss})
