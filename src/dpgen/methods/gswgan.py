"""GS-WGAN (Chen, Orekondy & Fritz, NeurIPS 2020): N_D critics on disjoint shards, warm-started
non-privately; the generator learns only from sanitized gradients of one randomly chosen critic per step.

Data: the method splits `trainer.datamodule.train_data` into N_D disjoint shards itself (a keyed hash of each
record, `data.partition`, where the reference draws a seeded permutation of positions: so that adding or removing
a record changes one shard only); the datamodule's loader (n_teachers = 1) only drives steps.
Critic i only ever sees shard i, its own pretraining generator and the released generator, so one record
influences one critic: the premise of the accounting in dpgen.privacy.gswgan.

Warm start: the critics' non-private pretraining is saved to `<run dir>/pretrained_critics.pt` together with
the shard table, and `pretrained_critics=<file>` starts another run from it (the reference's pretrain /
--load_dir split), e.g. the same critics for several budgets. It is refused unless the shards are the same, so
critic i has still seen shard i only.
"""
from __future__ import annotations

import logging
from pathlib import Path

import torch

from dpgen.aggregation.gradient_sanitizer import SanitizerParams, sanitize
from dpgen.aggregation.noise import secret_generator
from dpgen.data.partition import TeacherRecords, draw_batches, padded_table, partition_indices
from dpgen.files import atomic_write
from dpgen.methods.base import PrivateGenerator, running_stats_kept
from dpgen.nn.critic import CriticEnsemble
from dpgen.privacy.gswgan import (BOUND_ALIASES, CRITIC_UPDATES, GSWGAN_ORDERS, MECHANISM, PLD_BOUNDS,
                                  SUBSAMPLED_UPDATES, check_draw)
from dpgen.privacy.ledger import PrivacyLedger

log = logging.getLogger(__name__)

KEPT_CAVEAT = ("critic_updates=kept (the GS-WGAN paper's loop): the drawn critic keeps its updates, so a critic's state "
               "depends on which critics earlier steps drew, which stays secret; the accounting composes each step as "
               "a fresh draw of one critic and assumes it does not. This epsilon follows the paper's argument; it is "
               "not a proven bound (docs/methods/gswgan.md). critic_updates=discarded or scheduled makes it one.")
WARM_START, PARTIAL = "pretrained_critics.pt", "pretrained_critics.partial.pt"


class GSWGAN(PrivateGenerator):
    """Per Lightning step (reference source/main.py): draw critic j uniformly; `critic_steps` WGAN-GP steps of
    critic j on batches of its shard against the current generator; then one generator step whose only
    gradient is the sanitized d(-D_j(G(z, y)))/d G(z, y) of each of the `batch_size` samples; then the EMA. With
    critic_updates="discarded" a copy of critic j takes those steps and is thrown away after its gradients, so
    every critic stays at its warm start; "scheduled" (the default) does the same and, before the draw, gives the
    `scheduled_critics` critics (t m .. t m + m - 1) mod N_D of step t `scheduled_steps` steps (default
    `critic_steps`) that they keep (a public schedule, so the critics follow the generator without their states
    depending on the draws); the reference keeps the drawn critic's updates ("kept", which privacy.json flags).
    With sanitizer.draw="per_sample" (not in the paper) each sample's gradient comes from a critic drawn for it
    alone, the same way through a thrown-away copy, which makes the paper's count of B subsampled events per step
    the sound one (docs/methods/gswgan.md). `critic_fakes` chooses how the critic steps' fakes are made
    (`fakes_for`).

    The released generator (`generator`: `net_ema`) is the base class's moving average of the trained `net_g`
    with `ema_decay` 0.999 (decay min(1 - 1/(t+1), 0.999), the reference's exp_mov_avg); 0 releases `net_g`."""

    neighbouring = "add_remove"

    private_modules = ("critics",)  # trained on their own partitions and public inputs only

    def __init__(self, shape, num_classes, kind, z_dim: int = 10, batch_size: int = 32, n_discriminators: int = 1000,
                 critic_steps: int = 5, lr: float = 1e-4, betas: tuple[float, float] = (0.5, 0.9),
                 ema_decay: float = 0.999, critic_updates: str = "scheduled", scheduled_critics: int = 1,
                 scheduled_steps: int | None = None, critic_fakes: str = "own",
                 sanitizer: dict | None = None, critics: dict | None = None,
                 pretrain: dict | None = None, pretrained_critics: str | None = None, generator: dict | None = None,
                 class_probs=None, seed: int = 0):
        if kind != "image":
            raise ValueError("GS-WGAN is defined for images (its critics are convolutional)")
        super().__init__(shape, num_classes, kind, z_dim=z_dim, generator=generator, class_probs=class_probs,
                         ema_decay=ema_decay)
        self.batch_size, self.n_discriminators = int(batch_size), int(n_discriminators)
        self.critic_steps, self.lr, self.betas = int(critic_steps), lr, tuple(betas)
        self.seed = int(seed)
        if critic_updates not in CRITIC_UPDATES:
            raise ValueError(f"critic_updates must be one of {CRITIC_UPDATES}, got {critic_updates!r}")
        self.critic_updates = critic_updates
        self.sanitizer = SanitizerParams(n_discriminators=self.n_discriminators, **(sanitizer or {}))
        check_draw(self.sanitizer.draw, critic_updates)
        if self.critic_steps < 0 or self.critic_steps == 0 and (self.sanitizer.draw, critic_updates) != (
                "per_sample", "scheduled"):
            raise ValueError(f"critic_steps must be >= 1 (0 only with sanitizer.draw=per_sample and "
                             f"critic_updates=scheduled, where the schedule trains the critics), got {critic_steps}")
        if critic_updates != "scheduled" and (scheduled_critics != 1 or scheduled_steps is not None):
            raise ValueError("scheduled_critics and scheduled_steps need critic_updates=scheduled")
        if int(scheduled_critics) != scheduled_critics or not 1 <= scheduled_critics <= self.n_discriminators \
                or self.n_discriminators % scheduled_critics:
            raise ValueError(f"scheduled_critics must divide n_discriminators ({self.n_discriminators}), got "
                             f"{scheduled_critics}")
        if critic_fakes not in ("own", "pool"):
            raise ValueError(f"critic_fakes must be 'own' or 'pool', got {critic_fakes!r}")
        self.critic_fakes = critic_fakes
        self.scheduled_critics = int(scheduled_critics)
        self.scheduled_steps = self.critic_steps if scheduled_steps is None else int(scheduled_steps)
        if self.scheduled_steps < 1:
            raise ValueError(f"scheduled_steps must be >= 1, got {scheduled_steps}")
        self.critics = CriticEnsemble(self.n_discriminators, self.shape, self.num_classes, lr=lr, betas=self.betas,
                                      seed=self.seed, **(critics or {}))
        self.pretrain_args = dict(pretrain or {})
        self.pretrained_critics = pretrained_critics
        self.register_buffer("pretrained", torch.zeros((), dtype=torch.bool))
        self.orders = GSWGAN_ORDERS
        self.ledger = PrivacyLedger(self.orders, aliases=BOUND_ALIASES, pld_bounds=PLD_BOUNDS)
        self.rng = secret_generator()  # choice of critic, batches and sanitizer noise (aggregation/noise.py)
        self.shards: torch.Tensor | None = None
        self.shard_sizes: torch.Tensor | None = None
        self._step_cost = None

    def configure_optimizers(self):
        return torch.optim.Adam(self.net_g.parameters(), lr=self.lr, betas=self.betas)

    def on_load_checkpoint(self, checkpoint):
        # checkpoints from before GS-WGAN used the base class's average: `net_g` held the average, `net_train` the
        # trained generator; now `net_ema` and `net_g`
        state = checkpoint["state_dict"]
        if any(key.startswith("net_train.") for key in state):
            old = {key: state.pop(key) for key in [k for k in state if k.startswith(("net_g.", "net_train."))]}
            for key, value in old.items():
                net, name = key.split(".", 1)
                if net == "net_train":
                    state[f"net_g.{name}"] = value
                elif self.net_ema is not None:  # with ema_decay 0 the old average was a copy of the trained net
                    state[f"net_ema.{name}"] = value

    # data

    def setup(self, stage: str) -> None:
        if stage == "fit" and self.shards is None:
            data = self.trainer.datamodule.train_data
            # a (N_D, largest shard) index table padded with BLANK, and the shard sizes
            self.shards, self.shard_sizes = padded_table(partition_indices(data.stored, self.n_discriminators, self.seed))

    def shard_batch(self, s: int, e: int) -> tuple[torch.Tensor, torch.Tensor]:
        """`batch_size` records of each of the shards s..e-1 (`draw_batches`; an empty shard gives zeros with label
        0): x (e-s, b, *shape), y (e-s, b)."""
        return self.shard_batch_of(torch.arange(s, e))

    def shard_batch_of(self, critics: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """As `shard_batch`, for the shards of `critics` (k,)."""
        pick = draw_batches(self.shards[critics], self.shard_sizes[critics], self.batch_size,
                            torch.rand(len(critics), self.batch_size, generator=self.rng))
        x, y = TeacherRecords(self.trainer.datamodule.train_data)[pick]
        return x.to(self.device), y.to(self.device)

    def fakes_for(self, real_y: torch.Tensor) -> torch.Tensor:
        """Fakes (k, b, *shape) carrying each critic's labels (k, b), BatchNorm's running statistics left as they
        were. critic_fakes="own" (the reference): a generator batch of each critic's own, so BatchNorm's batch
        statistics mix no two shards. "pool": one generator batch of `batch_size` samples of every class (public
        labels), from which each of a critic's records takes a fake of its label drawn at random: private labels
        only choose among public samples, and the generator runs once for all k critics."""
        with torch.no_grad(), running_stats_kept(self.net_g):
            if self.critic_fakes == "own":
                return torch.stack([self.net_g(self.latent(len(y)), y) for y in real_y])
            per_class = self.batch_size
            classes = torch.arange(self.num_classes, device=self.device).repeat_interleave(per_class)
            pool = self.net_g(self.latent(len(classes)), classes).view(self.num_classes, per_class, *self.shape)
            pick = torch.randint(per_class, real_y.shape, generator=self.rng).to(self.device)
            return pool[real_y, pick]

    def on_fit_start(self) -> None:
        if bool(self.pretrained):
            return
        folder = Path(self.trainer.default_root_dir)
        if self.pretrained_critics:
            self.load_pretrained_critics(self.pretrained_critics)
        elif (folder / WARM_START).is_file():  # this run pretrained them before it stopped
            log.info("critics: the warm start this run saved, %s", folder / WARM_START)
            self.load_pretrained_critics(str(folder / WARM_START))
        else:
            self.pretrain_critics(folder)
        self.pretrained.fill_(True)

    def pretrain_critics(self, folder: Path) -> None:
        """The warm start, saved to `folder/pretrained_critics.pt`; on the way, its progress to
        `folder/pretrained_critics.partial.pt` every `pretrain.save_every_s` seconds, where a run started again
        in the same folder goes on from (after a crash or a stop: nothing but the last minutes lost)."""
        partial, args = folder / PARTIAL, {k: v for k, v in self.pretrain_args.items() if k != "save_every_s"}
        resume = None
        if partial.is_file():
            state = torch.load(partial, map_location=self.device)
            if state["pretrain"] != args:
                raise ValueError(f"{partial} is a warm start with other settings ({state['pretrain']}, not {args}): "
                                 "delete it, or run in another folder")
            self.load_critics(state, partial)
            resume = state["progress"]
            log.info("critics: going on with the warm start of %s from critic %d, step %d", partial,
                     resume["chunk"], resume["step"])

        def save(progress: dict) -> None:
            if self.trainer.is_global_zero:
                save_file({"shards": self.shards, "critics": self.critics.state_dict(), "pretrain": args,
                           "progress": progress}, partial)

        folder.mkdir(parents=True, exist_ok=True)
        self.critics.pretrain(self.shard_batch, seed=self.seed + 2, resume=resume, save=save, **self.pretrain_args)
        if self.trainer.is_global_zero:
            save_file({"shards": self.shards, "critics": self.critics.state_dict()}, folder / WARM_START)
            partial.unlink(missing_ok=True)

    def load_pretrained_critics(self, path: str) -> None:
        if not Path(path).is_file():
            raise FileNotFoundError(f"pretrained_critics: no file {path} (a run folder's pretrained_critics.pt)")
        self.load_critics(torch.load(path, map_location=self.device), path)

    def load_critics(self, state: dict, path) -> None:
        """The critics of a saved (finished or partial) warm start, refused unless pretrained on these shards."""
        if not torch.equal(state["shards"].cpu(), self.shards.cpu()):  # False on other shapes too
            raise ValueError(f"pretrained_critics {path} were pretrained on other shards (another seed, data set or "
                             "n_discriminators): critic i may only have seen shard i")
        try:
            self.critics.load_state_dict(state["critics"])
        except RuntimeError as err:
            raise ValueError(f"pretrained_critics {path} do not fit these critics (critics.model_dim?): {err}") from err

    # privacy

    @property
    def privacy_caveats(self) -> list[str]:
        return [KEPT_CAVEAT] if self.critic_updates == "kept" else []

    @property
    def pld_ready(self) -> bool:
        """The PLD of the sound bound holds where each step is the subsampled mechanism (docs/methods/gswgan.md)."""
        return self.critic_updates in SUBSAMPLED_UPDATES

    def step_cost(self):
        if self._step_cost is None:  # known before the step, under both bounds
            self._step_cost = self.sanitizer.step_cost(self.batch_size, pld=self.pld_ready)
        return self._step_cost

    # training

    def train_critics(self, s: int, e: int, steps: int) -> torch.Tensor:
        """`steps` WGAN-GP steps of critics s..e-1 at once, each on batches of its own shard against the current
        generator; the last step's losses (e-s,)."""
        for _ in range(steps):
            real_x, real_y = self.shard_batch(s, e)
            d_loss = self.critics.train_step(s, e, real_x, real_y, self.fakes_for(real_y), self.rng)
        return d_loss

    def draw_critics(self) -> torch.Tensor:
        """The critic of each of the `batch_size` samples (b,), the subsampling of the accounting: one drawn for all
        (per_step), or one drawn for each sample independently (per_sample)."""
        if self.sanitizer.draw == "per_sample":
            return torch.randint(self.n_discriminators, (self.batch_size,), generator=self.rng)
        return torch.randint(self.n_discriminators, (1,), generator=self.rng).expand(self.batch_size)

    def trained_copies(self, critics: torch.Tensor) -> tuple[dict, torch.Tensor | None]:
        """Copies of `critics` (k,) after `critic_steps` WGAN-GP steps each on batches of its own shard against the
        current generator; the ensemble keeps its state, so the steps are discarded after use. Returns the copies'
        stacked weights and their last losses (None: no steps)."""
        theta, exp_avg, exp_avg_sq, steps = self.critics.copies(critics)
        d_loss = None
        for _ in range(self.critic_steps):
            real_x, real_y = self.shard_batch_of(critics)
            steps += 1
            d_loss = self.critics.adam_step(theta, exp_avg, exp_avg_sq, steps, real_x, real_y, self.fakes_for(real_y),
                                            self.rng)
        return theta, d_loss

    def score_copies(self, theta: dict, slot: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """D(x_i, y_i) (b,) under copy `slot[i]` of the stacked `theta`; one copy (per_step) scores the batch at once."""
        if len(next(iter(theta.values()))) == 1:  # the copies are the distinct drawn critics, `unique` already
            return self.critics.critic({k: v[0] for k, v in theta.items()}, x, y)
        return self.critics.score_each({k: v[slot] for k, v in theta.items()}, x, y)

    def training_step(self, batch, batch_idx):
        if self.critic_updates == "scheduled":  # chosen by the step number alone, never by a draw
            s = self.global_step * self.scheduled_critics % self.n_discriminators
            d_loss = self.train_critics(s, s + self.scheduled_critics, self.scheduled_steps).mean()
        if self.critic_updates == "kept":  # the paper's loop: the drawn critic keeps its steps
            j = int(torch.randint(self.n_discriminators, (1,), generator=self.rng))  # the subsampling of the accounting
            d_loss = self.train_critics(j, j + 1, self.critic_steps)[0]
            fake, grads, score = self.critic_gradients(lambda probe, y: self.critics.score(j, probe, y))
        else:  # copies of the drawn critics take the steps and are thrown away: no state depends on a draw
            critics, slot = self.draw_critics().unique(return_inverse=True)  # a critic drawn twice is trained once
            theta, drawn_loss = self.trained_copies(critics)
            d_loss = d_loss if drawn_loss is None else drawn_loss.mean()
            fake, grads, score = self.critic_gradients(lambda probe, y: self.score_copies(theta, slot, probe, y))
        private, rdp = sanitize(grads, self.sanitizer, self.orders, self.rng)
        event, count = self.sanitizer.pld_events(self.batch_size)
        self.ledger.record(MECHANISM[self.sanitizer.draw], rdp, count=count, event=event if self.pld_ready else None,
                           params={"n_discriminators": self.n_discriminators, "batch_size": self.batch_size,
                                   "noise_multiplier": self.sanitizer.noise_multiplier, "clip": self.sanitizer.clip,
                                   "critic_updates": self.critic_updates, "scheduled_critics": self.scheduled_critics,
                                   "scheduled_steps": self.scheduled_steps})
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(fake, private / self.batch_size)  # the generator sees the sanitized gradient only
        opt.step()
        self.update_ema()
        self.log_losses({}, private={"loss/d": d_loss, "loss/g": -score.mean()})  # the critics' are private

    def critic_gradients(self, score_of):
        """A generator batch `fake`, row i of `grads` d(-D(x_i)) / d x_i and `score` D(x) (b,), for the critics'
        scores `score_of(x, y)` (b,)."""
        y = self.random_labels(self.batch_size)
        fake = self.net_g(self.latent(self.batch_size), y)
        probe = fake.detach().requires_grad_(True)
        score = score_of(probe, y)
        (grads,) = torch.autograd.grad(-score.sum(), probe)
        return fake, grads, score.detach()


def save_file(state: dict, path: Path) -> None:
    atomic_write(path, lambda f: torch.save(state, f))  # a kill while writing leaves the previous file whole
