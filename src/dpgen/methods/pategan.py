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
and ledger), so no generator over budget is ever released. `vote=score` instead records one Gaussian release per
student step (`gaussian_score`, GDP), the same whatever the votes, so it is checked before each step.
"""
from __future__ import annotations

import torch
from torch.nn.functional import binary_cross_entropy_with_logits as bce

from dpgen.aggregation import score_vote
from dpgen.aggregation.pate_vote import laplace_vote_batch, secret_rng, step_cost
from dpgen.methods.base import PrivateGenerator
from dpgen.nn.ensemble import TeacherEnsemble
from dpgen.privacy.ledger import NO_DATA_DEPENDENT_BOUND, PrivacyLedger
from dpgen.privacy.rdp import DEFAULT_ORDERS

MECHANISM = "laplace_pate"
VOTES = ("sample", "pairwise", "median", "score")
STUDENT_LOSSES = ("bce", "wasserstein")


def above_label_median(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """(T, n) teacher logits minus each teacher's (lower) median logit over the samples of the same label: > 0
    where the teacher ranks a sample in the more real half of its label's samples (`vote=median`)."""
    out = torch.empty_like(logits)
    for c in y.unique():
        same = y == c
        out[:, same] = logits[:, same] - logits[:, same].median(dim=1, keepdim=True).values
    return out


class PATEGAN(PrivateGenerator):
    """PATE-GAN Algorithm 1 with conditional nets (the one-hot label is an input of every net).

    lam: inverse scale of the Laplace vote noise (Lap(1 / lam) per count, PATE-GAN appendix Thm. 5).
    batch_size: n, the generated samples of each student step and of the generator step.
    teacher_steps, student_steps: n_T and n_S (5 and 5 in the paper's appendix).
    teacher_warmup: extra rounds of n_T teacher steps (on the first step's teacher batch, fresh fakes) before
        the first vote. Not in Algorithm 1; free under PATE, whose only release is the noisy vote (PATE-GAN
        section 3: the teachers' parameters are never published), and it lets the first votes be confident,
        hence cheap under the data-dependent bound. 0 = the paper.
    vote: what one query asks. "sample" (Algorithm 1): is this generated sample real? Each teacher votes real
        iff its logit is > 0 (eq. 3); the student learns the labels and the generator learns -log S(G(z)).
        "pairwise" (not in the paper): which of two generated samples of one label is the more real? Each
        teacher votes for the one its logit ranks higher; the student learns a score S with
        P(a above b) = sigmoid(S(a) - S(b)) and the generator raises S. The teachers tell every generated sample
        from their records as soon as training starts, so the sample vote is unanimously "fake" and teaches the
        student nothing (section 4.2.2); a ranking of fakes is informative however well they are told apart.
        The same binary vote of the same teachers on public inputs, one query per pair: the same noise and
        the same accounting (docs/PRIVACY.md).
        "median" (not in the paper): is this generated sample among the more real half of its label's samples in
        the batch? Teacher t votes real iff its logit on the sample is above its median logit over the batch's
        samples of that label (`above_label_median`); the student and the generator are the paper's. Like
        "pairwise" it stays informative however well the teachers tell generated samples from records, with one
        label per sample. A teacher's votes are still a function of its own partition and public inputs only,
        so one record moves one teacher's votes: the same accounting (docs/PRIVACY.md).
        "score" (not in the paper): how real is this generated sample? The release is the teachers' mean logit,
        each clipped to +-score_clip, plus Gaussian noise of std score_noise x its L2 sensitivity
        (aggregation/score_vote.py: each student step's batch is (1 / score_noise)-GDP, whatever the votes).
        The student regresses the released scores, both centred on the batch (squared error), and the
        generator raises the student's score. A binary vote that is unanimously "fake" says nothing about which
        fakes are nearer the records; the mean score still ranks them while the logits are inside the clip.
    pause_teachers_below: the teachers skip an iteration's n_T steps while the previous iteration's released
        votes called fewer than this share of the generated samples real (not in the paper; 0 = the paper: they
        always train). The rule reads released labels only, so it is post-processing and the accounting is the
        paper's. Once the teachers tell every generated sample from their records the vote says "fake"
        unanimously and the generator gets no signal (section 4.2.2); paused teachers let it catch up first.
    student_loss: "bce" (Algorithm 1: the student is a classifier of the released labels, the generator
        minimises -log S(G(z))) or "wasserstein" (not in the paper; the PATE-GAN authors' 2020 code): the student
        is a weight-clipped critic that raises its score on samples voted real and lowers it on those voted fake,
        max mean(l S(u)) - mean((1 - l) S(u)) over the batch, its weights clipped to +-student_clip after each
        step, and the generator minimises -mean S(G(z)); student and generator then use RMSProp (WGAN, Arjovsky
        et al. 2017, Algorithm 1). A score that does not saturate, so the generator keeps a direction towards
        the samples voted real. It reads released labels only: post-processing, the paper's accounting.
    instance_noise: std of Gaussian noise added to every input (image or row) the teachers or the student see,
        records and generated samples alike, and to the generated samples the generator is trained through (not in
        the paper; instance noise, Sonderby et al., ICLR 2017, arXiv:1610.04490). The noised records and generated
        distributions overlap, so the teachers cannot tell every generated sample from the records (the unanimous
        "fake" of section 4.2.2), and the student's queries fill the space around the generated samples, so it
        learns the teachers' labels off them too. The queries' noise is public randomness: the accounting is the
        paper's (docs/PRIVACY.md). 0 = the paper. Measured on MNIST (docs/RESULTS.md): the vote still goes
        unanimous, later.
    Tables: generator and student are depth-3 MLPs with hidden sizes d, d/2, d (appendix "Hyper-parameter
    Optimization"); images: the DCGAN-style conditional nets of G-PATE (appendix E).
    """

    neighbouring = "add_remove"

    private_modules = ("ensemble",)  # trained on their own partitions and public inputs only

    def __init__(self, shape, num_classes, kind, n_teachers: int, lam: float, batch_size: int = 64,
                 teacher_steps: int = 5, student_steps: int = 5, teacher_warmup: int = 0, z_dim: int = 100,
                 lr: float = 1e-4, beta1: float = 0.5, vote: str = "sample", generator: dict | None = None,
                 student: dict | None = None, teachers: dict | None = None, pause_teachers_below: float = 0.0,
                 student_loss: str = "bce", student_clip: float = 0.01, score_clip: float = 5.0,
                 score_noise: float = 1.0, instance_noise: float = 0.0, class_probs=None, ema_decay: float = 0.0,
                 seed: int = 0):
        if not lam > 0:
            raise ValueError(f"lam (inverse Laplace scale) must be > 0, got {lam}")
        if min(batch_size, teacher_steps, student_steps, n_teachers) < 1:
            raise ValueError("batch_size, teacher_steps, student_steps and n_teachers must be >= 1")
        if teacher_warmup < 0:
            raise ValueError(f"teacher_warmup must be >= 0, got {teacher_warmup}")
        if vote not in VOTES:
            raise ValueError(f"vote must be one of {VOTES}, got {vote!r}")
        if not 0 <= pause_teachers_below <= 1:
            raise ValueError(f"pause_teachers_below is a share of votes in [0, 1], got {pause_teachers_below}")
        if pause_teachers_below and vote != "sample":
            raise ValueError("pause_teachers_below reads the share of samples voted real: it needs vote=sample")
        if student_loss not in STUDENT_LOSSES:
            raise ValueError(f"student_loss must be one of {STUDENT_LOSSES}, got {student_loss!r}")
        if student_loss == "wasserstein" and vote in ("pairwise", "score"):
            raise ValueError("student_loss=wasserstein learns released real/fake labels: it needs vote=sample or median")
        if vote == "score" and not (score_clip > 0 and score_noise > 0):
            raise ValueError(f"vote=score needs score_clip > 0 and score_noise > 0, got {score_clip}, {score_noise}")
        if instance_noise < 0:
            raise ValueError(f"instance_noise is a standard deviation >= 0, got {instance_noise}")
        if not student_clip > 0:
            raise ValueError(f"student_clip (the critic's weight bound) must be > 0, got {student_clip}")
        super().__init__(shape, num_classes, kind, z_dim=z_dim, generator=generator, class_probs=class_probs,
                         ema_decay=ema_decay)
        self.n_teachers, self.lam = int(n_teachers), float(lam)
        self.batch_size, self.teacher_steps, self.student_steps = int(batch_size), int(teacher_steps), int(student_steps)
        self.teacher_warmup, self.lr, self.beta1, self.vote = int(teacher_warmup), lr, beta1, vote
        self.student_loss, self.student_clip = student_loss, float(student_clip)
        self.score_clip, self.score_noise = float(score_clip), float(score_noise)
        self.instance_noise = float(instance_noise)
        self.student = self.build_judge("relu", **(student or {}))
        self.ensemble = TeacherEnsemble(self.n_teachers, self.shape, self.num_classes, seed=seed,
                                        **{"lr": lr, "betas": (beta1, 0.999), **(teachers or {})})
        self.orders = DEFAULT_ORDERS
        self.ledger = PrivacyLedger(self.orders, aliases=NO_DATA_DEPENDENT_BOUND if vote == "score" else None)
        self._step_cost = None
        self.rng = None  # Laplace noise stream, from the OS's entropy at train start (fresh on resume)
        self.register_buffer("warmed_up", torch.tensor(self.teacher_warmup == 0))  # in checkpoints: once per run
        self.pause_teachers_below = float(pause_teachers_below)
        self.register_buffer("last_real_share", torch.tensor(1.0))  # the last iteration's released share "real"

    def configure_optimizers(self):
        if self.student_loss == "wasserstein":  # WGAN's optimizer (Arjovsky et al. 2017, Algorithm 1)
            return (torch.optim.RMSprop(self.net_g.parameters(), lr=self.lr),
                    torch.optim.RMSprop(self.student.parameters(), lr=self.lr))
        betas = (self.beta1, 0.999)
        return (torch.optim.Adam(self.net_g.parameters(), lr=self.lr, betas=betas),
                torch.optim.Adam(self.student.parameters(), lr=self.lr, betas=betas))

    def queries_per_step(self) -> int:
        return self.student_steps * self.batch_size

    def step_cost(self):
        if self._step_cost is None and self.vote == "score":  # a Gaussian per student step, whatever the votes
            self._step_cost = score_vote.step_cost(self.score_noise, self.student_steps, self.orders)
        elif self._step_cost is None:  # fixed by the parameters; its best case takes every vote, so it is kept
            self._step_cost = step_cost(self.lam, self.n_teachers, self.queries_per_step(), self.orders)
        return self._step_cost

    def on_train_start(self) -> None:
        self.rng = secret_rng()

    def on_load_checkpoint(self, checkpoint):
        # checkpoints from before pause_teachers_below lack the buffer; their teachers always trained (share 1)
        checkpoint["state_dict"].setdefault("last_real_share", torch.tensor(1.0))

    def noised(self, x: torch.Tensor) -> torch.Tensor:
        """x plus Gaussian noise of std `instance_noise` (the identity at 0)."""
        return x + self.instance_noise * torch.randn_like(x) if self.instance_noise else x

    def generated(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """n generated samples as the teachers and the student see them (`noised`), differentiable in the
        generator."""
        x, y = super().generated(n)
        return self.noised(x), y

    def teacher_step(self, real_x: torch.Tensor, real_y: torch.Tensor) -> torch.Tensor:
        """Algorithm 1 lines 5-10: every teacher takes an Adam step on its own b records vs one fake batch."""
        with torch.no_grad():
            fake, fake_y = self.generated(real_x.shape[1])
        return self.ensemble.train_step(self.noised(real_x), real_y, fake, fake_y)

    def student_step(self) -> tuple[torch.Tensor, float]:
        """Algorithm 1 lines 12-21: n queries on generated samples (or pairs, `vote`), answered by the noisy vote,
        charged, then learned. Returns the student's loss and the fraction of the released labels that say
        "real" (pairwise: "the first of the pair")."""
        with torch.no_grad():
            u, y = self.generated(self.batch_size)
            logits = self.ensemble.predict_logits(u, y)
            if self.vote == "pairwise":  # a second sample of each label: teacher t votes "u" iff T_t(u) > T_t(v)
                v = self.noised(self.net_g(self.latent(self.batch_size), y))
                logits = logits - self.ensemble.predict_logits(v, y)
            elif self.vote == "median":
                logits = above_label_median(logits, y)
        if self.vote == "score":
            return self.score_student_step(u, y, logits)
        release = laplace_vote_batch(logits, self.lam, self.orders, self.rng)
        self.ledger.record(MECHANISM, release.rdp, count=release.count,
                           params={"lam": self.lam, "laplace_scale": 1.0 / self.lam, "n_teachers": self.n_teachers})
        target = torch.as_tensor(release.labels, dtype=u.dtype, device=u.device)
        score = self.student(u, y).view(-1)
        if self.vote == "pairwise":  # Bradley-Terry: P(u above v) = sigmoid(S(u) - S(v))
            score = score - self.student(v, y).view(-1)
        if self.student_loss == "wasserstein":  # -(mean(l S) - mean((1 - l) S)), both means over the batch
            loss = ((1 - 2 * target) * score).mean()
        else:
            loss = bce(score, target)
        opt = self.optimizers()[1]
        opt.zero_grad()
        self.manual_backward(loss)
        opt.optimizer.step()  # the raw optimizer: global_step counts generator steps only
        if self.student_loss == "wasserstein":  # the critic's Lipschitz bound by weight clipping (WGAN)
            with torch.no_grad():
                for p in self.student.parameters():
                    p.clamp_(-self.student_clip, self.student_clip)
        return loss.detach(), float(release.labels.mean())

    def score_student_step(self, u: torch.Tensor, y: torch.Tensor, logits: torch.Tensor) -> tuple[torch.Tensor, float]:
        """`vote=score`: release the noisy mean clipped score of each of n samples, charge it, regress the student
        on it. Returns the loss and the mean released score."""
        release = score_vote.score_vote(logits, self.score_clip, self.score_noise, self.rng)
        self.ledger.record_gdp(score_vote.MECHANISM, release.mu,
                               params={"score_clip": self.score_clip, "score_noise": self.score_noise,
                                       "sigma": release.sigma, "n_teachers": self.n_teachers})
        # centred on the batch: on the raw scores the student spends its steps on their level, which moves with the
        # teachers and the generator, and on a toy learned the slope with the wrong sign, so the generator fell
        score, target = self.student(u, y).view(-1), release.scores
        loss = ((score - score.mean() - (target - target.mean())) ** 2).mean()
        opt = self.optimizers()[1]
        opt.zero_grad()
        self.manual_backward(loss)
        opt.optimizer.step()
        return loss.detach(), float(release.scores.mean())

    def generator_step(self) -> torch.Tensor:
        """Algorithm 1 lines 22-24, with the non-saturating form -log S(G(z)) of eq. 5's log(1 - S(G(z)));
        pairwise and the Wasserstein student: -S(G(z)), the student's score raised."""
        if self.vote in ("pairwise", "score") or self.student_loss == "wasserstein":
            return self.generator_step_against(self.student, lambda s: -s.mean(), self.batch_size)
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
        train_teachers = float(self.last_real_share) >= self.pause_teachers_below
        if train_teachers:
            t_loss = torch.stack([self.teacher_step(x, y) for x, y in chunks]).mean()
        s_losses, released = zip(*(self.student_step() for _ in range(self.student_steps)))
        released = sum(released) / len(released)
        if self.vote != "score":
            self.last_real_share.fill_(released)
        g_loss = self.generator_step()
        # votes/real: the share of generated samples the (noisy, released) vote calls real; the student learns
        # nothing the generator can use while it is 0 (PATE-GAN section 4.2.2). votes/score: the mean released score
        self.log_losses({"loss/student": torch.stack(s_losses).mean(), "loss/g": g_loss,
                         "votes/score" if self.vote == "score" else "votes/real": released,
                         "teachers/trained": float(train_teachers)},
                        private={"loss/teachers": t_loss} if train_teachers else {})
