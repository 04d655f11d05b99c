"""`PrivateGenerator`: the base class every method (private or not) shares."""
from __future__ import annotations

import copy
from contextlib import contextmanager

import lightning.pytorch as pl
import torch
from torch import nn

from dpgen.nn.discriminator import ConditionalDiscriminator
from dpgen.nn.fc import ConditionalMLP, table_hidden
from dpgen.nn.generator import ConditionalImageGenerator, ConditionalTableGenerator, generate, latent
from dpgen.nn.mixed_table import MixedTableGenerator


class PrivateGenerator(pl.LightningModule):
    """A conditional generator trained with manual optimization.

    Contract used by the callbacks and the CLI:
      - `generator`: the `nn.Module` that is released;
      - `private_modules`: names of submodules that are functions of their own private partitions and public
        inputs only (teachers, critics); `PrivacyBudget` rolls back everything else a step changed;
      - `neighbouring`: the neighbouring relation its guarantee is about (`privacy.ledger.NEIGHBOURING`);
      - `ledger`: the `PrivacyLedger` every private release is written to (None for a non-private method);
      - `step_cost()`: what the next step can cost (privacy/cost.py `StepCost`), or None when unknown;
      - `pld_ready`: True when every release is recorded with a PLD event (privacy.conversion=pld allowed);
      - `sample(n, labels)`: `(x, y)` synthetic records on the CPU;
      - `released_step(global_step)`: the step of the generator as it stands;
      - `process_split`: True when its private state can be split over torchrun's processes (trainer=ddp).

    `ema_decay` > 0 (methods whose generator steps call `update_ema`): the released generator is
    an exponential moving average of the trained one (`net_ema`, updated after each generator step by
    `ema_update`). It is a function of the trained generator's states only, so post-processing: the
    accounting does not change.
    """

    pld_ready = False
    process_split = False
    private_modules: tuple[str, ...] = ()
    log_private = False  # train.py sets it from `log_private_losses`
    neighbouring: str | None = None  # a key of privacy.ledger.NEIGHBOURING (private methods)

    def __init__(self, shape: tuple[int, ...], num_classes: int, kind: str, z_dim: int = 100,
                 generator: dict | None = None, class_probs: list[float] | None = None, ema_decay: float = 0.0):
        if not 0 <= ema_decay < 1:
            raise ValueError(f"ema_decay must be in [0, 1) (0: no moving average), got {ema_decay}")
        super().__init__()
        self.automatic_optimization = False
        self.shape, self.num_classes, self.kind, self.z_dim = tuple(shape), int(num_classes), kind, int(z_dim)
        self.class_probs = None if class_probs is None else torch.as_tensor(class_probs, dtype=torch.float)
        self.ledger = None
        self.latent_dist = "uniform"  # U(-1, 1) as the reference DCGAN code; subclasses may choose "normal"
        self.sample_batch_norm = None  # b: sample with BatchNorm statistics of batches of b (nn/generator.py)
        self.net_g = self.build_generator(**(generator or {}))
        self.generator_ema_decay = float(ema_decay)
        self.net_ema = copy.deepcopy(self.net_g).requires_grad_(False) if ema_decay else None

    def released_step(self, global_step: int) -> int:
        """`global_step` less the steps `PrivacyBudget` rolled back: they ran, but the generator is not theirs."""
        return global_step - ((self.ledger.stop or {}).get("discarded_steps", 0) if self.ledger is not None else 0)

    def build_generator(self, table: dict | None = None, **arch) -> nn.Module:
        """Images: the conditional deconvolution generator. Tables: PATE-GAN's MLP with a sigmoid on every column,
        or, given `table` (the options of `table_generator`), a drawn category per one-hot block."""
        if self.kind == "image":
            return ConditionalImageGenerator(self.shape, self.num_classes, z_dim=self.z_dim, **arch)
        if self.kind == "table":
            if table is not None:
                return self.table_generator(**table)
            return ConditionalTableGenerator(self.shape, self.num_classes, z_dim=self.z_dim, **arch)
        raise ValueError(f"unknown data kind {self.kind!r} (expected 'image' or 'table')")

    def table_generator(self, categorical: dict | None = None, **arch) -> nn.Module:
        """DP-MERF's tabular MLP (hidden 4F, 2F by default) with a sigmoid for the continuous columns and a drawn
        category per one-hot block (nn/mixed_table.py); `categorical` is the datamodule's {column: values}, whose
        blocks follow the continuous columns (data/tables.py), so only their sizes matter here."""
        one_hot = [len(values) for values in (categorical or {}).values()]
        return MixedTableGenerator(self.shape, self.num_classes, self.z_dim, one_hot=one_hot, **arch)

    def build_judge(self, table_activation: str, **arch) -> nn.Module:
        """A conditional discriminator D(x, y) -> logit: G-PATE's convolutional one for images (appendix E), an
        MLP with PATE-GAN's hidden sizes d, d/2, d for tables (its section 5)."""
        if self.kind == "image":
            return ConditionalDiscriminator(self.shape, self.num_classes, **arch)
        (features,) = self.shape
        hidden = tuple(arch.pop("hidden", table_hidden(features)))
        return ConditionalMLP(features, 1, self.num_classes, hidden, table_activation, **arch)

    @property
    def generator(self) -> nn.Module:
        return self.net_g if self.net_ema is None else self.net_ema

    def latent(self, n: int) -> torch.Tensor:
        """The generator's input noise, the same distribution in training and generation."""
        return latent(n, self.z_dim, self.latent_dist, self.device)

    def random_labels(self, n: int) -> torch.Tensor:
        """Training labels of fake samples: uniform, or drawn from `class_probs` (e.g. G-PATE's private ratio)."""
        if self.class_probs is None:
            return torch.randint(0, self.num_classes, (n,), device=self.device)
        return torch.multinomial(self.class_probs.to(self.device), n, replacement=True)

    def generated(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """n training samples G(z, y) with their labels (`random_labels`), differentiable in the generator."""
        y = self.random_labels(n)
        return self.net_g(self.latent(n), y), y

    def sample_labels(self, n: int) -> torch.Tensor:
        """Labels of a synthetic data set: balanced, or drawn from `class_probs`."""
        if self.class_probs is None:
            return torch.arange(n, device=self.device) % self.num_classes
        return self.random_labels(n)

    def step_cost(self):
        return None

    def log_losses(self, public: dict, private: dict | None = None) -> None:
        """Progress numbers for the logs (metrics.csv, train.log, W&B, metrics.json). `public`: functions of released
        (privatised) quantities and public inputs only, always logged. `private`: computed on private records
        without noise (teacher, critic and real-batch losses): not differentially private, so logged only when
        `log_private` is set, under `private/`, and never into metrics.json."""
        values = dict(public)
        if self.log_private and private:
            values |= {f"private/{key}": value for key, value in private.items()}
        self.log_dict(values, prog_bar=True)

    def generator_step_against(self, judge: nn.Module, loss, n: int) -> torch.Tensor:
        """One step of the generator (its optimizer is the first) on `loss(logits)` of the frozen `judge` on n
        fresh samples G(z, y): nothing is left on the judge (`frozen`)."""
        fake, y = self.generated(n)
        with frozen(judge):
            value = loss(judge(fake, y).view(-1))
            opt = self.optimizers()[0]
            opt.zero_grad()
            self.manual_backward(value)
            opt.step()
        self.update_ema()
        return value.detach()

    def update_ema(self) -> None:
        """After a generator step (global_step counts it): `net_ema` follows `net_g` (`ema_update`); a no-op
        without it."""
        if self.net_ema is not None:
            ema_update(self.net_ema, self.net_g, self.global_step - 1, self.generator_ema_decay)

    def on_train_batch_start(self, batch, batch_idx):
        # PrivacyBudget requests a stop before a step that could exceed the budget: -1 skips that step.
        if self.trainer.should_stop:
            return -1

    def sample(self, n: int, labels: torch.Tensor | None = None, batch_size: int = 1000):
        """`(x, y)` on the CPU: n synthetic records of the released generator (eval mode, or BatchNorm on batches
        of `sample_batch_norm` samples when that is set)."""
        labels = self.sample_labels(n) if labels is None else labels.to(self.device)
        x = generate(self.generator, labels, self.z_dim, self.latent_dist, batch_size, self.sample_batch_norm)
        return x, labels.cpu()

    def release(self) -> dict:
        """What `generate.py` needs to sample without this class: the generator module itself (on the CPU)
        and how to feed it."""
        return {"generator": self.generator, "z_dim": self.z_dim, "latent_dist": self.latent_dist,
                "sample_batch_norm": self.sample_batch_norm,
                "class_probs": None if self.class_probs is None else self.class_probs.tolist(),
                "shape": list(self.shape), "num_classes": self.num_classes, "kind": self.kind}


@torch.no_grad()
def ema_update(ema: nn.Module, net: nn.Module, t: int, max_decay: float) -> None:
    """After the generator's step t (0-based): ema <- decay ema + (1 - decay) net with decay =
    min(1 - 1/(t+1), max_decay) (GS-WGAN's exp_mov_avg), so the average starts at the first step's weights;
    buffers (BatchNorm statistics) are the trained net's."""
    decay = min(1 - 1 / (t + 1), max_decay)
    for a, p in zip(ema.parameters(), net.parameters(), strict=True):
        a.mul_(decay).add_(p, alpha=1 - decay)
    for a, b in zip(ema.buffers(), net.buffers(), strict=True):
        a.copy_(b)


@contextmanager
def running_stats_kept(net: nn.Module):
    """`net` runs as it is inside the block (BatchNorm in training mode normalises with batch statistics), but its
    buffers (BatchNorm running statistics) are restored afterwards: a forward pass on private inputs leaves nothing
    in them, so nothing private reaches what is released through them. Restored even on an error."""
    saved = [buffer.clone() for buffer in net.buffers()]
    try:
        yield net
    finally:
        with torch.no_grad():
            for buffer, value in zip(net.buffers(), saved):
                buffer.copy_(value)


@contextmanager
def frozen(net: nn.Module):
    """`net` takes no gradient inside the block (and an Opacus `GradSampleModule` computes no per-sample
    gradients): a generator step through a discriminator leaves nothing on it. Restored even on an error."""
    hooked = hasattr(net, "disable_hooks")
    net.requires_grad_(False)
    if hooked:
        net.disable_hooks()
    try:
        yield net
    finally:
        if hooked:
            net.enable_hooks()
        net.requires_grad_(True)
