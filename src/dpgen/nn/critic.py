"""GS-WGAN's discriminators (Chen et al. 2020): a conditional projection critic and N of them as one
vectorized module (stacked weights, torch.func.vmap over the critic dimension, chunks of `chunk_size`)."""
from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence

import torch
from rich.progress import track
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F

from dpgen.nn.fc import FCGenerator

log = logging.getLogger(__name__)


class ProjectionCritic(nn.Module):
    """GS-WGAN's DCGAN critic without spectral norm: three 5x5 stride-2 convs (d, 2d, 4d channels, ReLU), then
    linear(h) + <embed(y), h> (projection conditioning). No normalisation layer: the gradient penalty is per sample."""

    def __init__(self, in_shape: Sequence[int], num_classes: int, model_dim: int = 64, n_convs: int = 3):
        super().__init__()
        channels, height, width = in_shape
        outs = [model_dim * 2**i for i in range(n_convs)]
        self.convs = nn.ModuleList(nn.Conv2d(c, o, 5, stride=2, padding=2) for c, o in zip([channels, *outs], outs))
        for _ in range(n_convs):
            height, width = math.ceil(height / 2), math.ceil(width / 2)
        features = outs[-1] * height * width
        self.linear = nn.Linear(features, 1)
        self.embed = nn.Embedding(num_classes, features)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = x
        for conv in self.convs:
            h = F.relu(conv(h))
        h = h.flatten(1)
        return self.linear(h).squeeze(1) + (self.embed(y) * h).sum(1)


def key(name: str) -> str:
    return name.replace(".", "_")


def stacked_init(module: nn.Module, n: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """n independent initialisations of `module`'s parameters, stacked (copy dimension first): PyTorch's
    default Linear/Conv2d init U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases (a bias uses its
    weight's fan_in); an embedding gets U(-1/sqrt(width), 1/sqrt(width)) like the linear layer it pairs with."""
    params = dict(module.named_parameters())
    out = {}
    for name, p in params.items():
        if name.startswith("embed"):
            fan_in = p.shape[-1]
        else:
            fan_in = math.prod(params[name.rsplit(".", 1)[0] + ".weight"].shape[1:])
        bound = 1 / math.sqrt(fan_in)
        out[name] = torch.empty(n, *p.shape).uniform_(-bound, bound, generator=generator)
    return out


def adam_update(params: dict, grads: dict, exp_avg: dict, exp_avg_sq: dict, steps: torch.Tensor, lr: float,
                betas: tuple[float, float], eps: float = 1e-8) -> None:
    """One Adam step (Kingma & Ba 2015, Algorithm 1) on stacked tensors, each copy with its own step count
    `steps` (n,), already incremented for this step. In place."""
    b1, b2 = betas
    for name, g in grads.items():
        shape = (-1,) + (1,) * (g.dim() - 1)
        c1 = (1 - b1 ** steps.to(g.dtype)).view(shape)
        c2 = (1 - b2 ** steps.to(g.dtype)).view(shape)
        exp_avg[name].mul_(b1).add_(g, alpha=1 - b1)
        exp_avg_sq[name].mul_(b2).addcmul_(g, g, value=1 - b2)
        params[name].sub_(lr * (exp_avg[name] / c1) / ((exp_avg_sq[name] / c2).sqrt() + eps))


class CriticEnsemble(nn.Module):
    """n independent `ProjectionCritic`s, each with its own Adam state and step count, trained with WGAN-GP
    (Gulrajani et al. 2017) plus GS-WGAN's drift term drift_weight * D(real)^2. Parameters and Adam moments are
    (n, *shape) buffers; work runs on chunks of critics through torch.func.vmap."""

    def __init__(self, n: int, in_shape: Sequence[int], num_classes: int, *, model_dim: int = 64, chunk_size: int = 50,
                 lr: float = 1e-4, betas: tuple[float, float] = (0.5, 0.9), gp_weight: float = 10.0,
                 drift_weight: float = 1e-3, seed: int = 0):
        super().__init__()
        self.n, self.in_shape, self.num_classes = int(n), tuple(in_shape), int(num_classes)
        self.chunk_size, self.lr, self.betas = int(chunk_size), float(lr), tuple(betas)
        self.gp_weight, self.drift_weight = float(gp_weight), float(drift_weight)
        with torch.device("meta"):
            self._template = (ProjectionCritic(in_shape, num_classes, model_dim),)  # a tuple: not a submodule
        self.names = [name for name, _ in self.template.named_parameters()]
        self.params, self.exp_avg, self.exp_avg_sq = nn.Module(), nn.Module(), nn.Module()
        generator = torch.Generator().manual_seed(seed)
        for name, value in stacked_init(ProjectionCritic(in_shape, num_classes, model_dim), self.n, generator).items():
            self.params.register_buffer(key(name), value)
            self.exp_avg.register_buffer(key(name), torch.zeros_like(value))
            self.exp_avg_sq.register_buffer(key(name), torch.zeros_like(value))
        self.register_buffer("steps", torch.zeros(self.n, dtype=torch.long))

    @property
    def template(self) -> ProjectionCritic:
        return self._template[0]

    def stacked(self, container: nn.Module, s: int, e: int) -> dict[str, torch.Tensor]:
        return {name: getattr(container, key(name))[s:e] for name in self.names}

    def chunks(self) -> list[tuple[int, int]]:
        return [(s, min(s + self.chunk_size, self.n)) for s in range(0, self.n, self.chunk_size)]

    def critic(self, theta: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return functional_call(self.template, theta, (x, y))

    def score(self, i: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """D_i(x, y) (b,), differentiable w.r.t. x only (the critic's weights are buffers)."""
        return self.critic({name: t[0] for name, t in self.stacked(self.params, i, i + 1).items()}, x, y)

    def score_each(self, theta: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """D_i(x_i, y_i) for each sample i (b,), critic i's weights row i of the stacked `theta` (`copies`, indexed
        by sample); differentiable w.r.t. x only."""
        return vmap(lambda th, xi, yi: self.critic(th, xi[None], yi[None])[0])(theta, x, y)

    def copies(self, indices: torch.Tensor) -> tuple[dict, dict, dict, torch.Tensor]:
        """Copies of critics `indices`: stacked weights, Adam moments and step counts, for `adam_step`; the
        ensemble itself is left as it is."""
        index = indices.to(self.steps.device)
        return (*({name: t[index] for name, t in self.stacked(getattr(self, part), 0, self.n).items()}
                  for part in ("params", "exp_avg", "exp_avg_sq")), self.steps[index].clone())

    def loss(self, theta, real_x, real_y, fake_x, alpha):
        """WGAN-GP critic loss of one critic: D(fake) - D(real) + gp (|grad D(interpolate)| - 1)^2 + drift D(real)^2."""
        d_real, d_fake = self.critic(theta, real_x, real_y), self.critic(theta, fake_x, real_y)
        mixed = alpha * real_x + (1 - alpha) * fake_x
        slopes = grad(lambda m: self.critic(theta, m, real_y).sum())(mixed).flatten(1)
        penalty = ((slopes.pow(2).sum(1) + 1e-12).sqrt() - 1).pow(2).mean()
        return (d_fake.mean() - d_real.mean() + self.gp_weight * penalty
                + self.drift_weight * d_real.pow(2).mean())

    def train_step(self, s: int, e: int, real_x: torch.Tensor, real_y: torch.Tensor, fake_x: torch.Tensor,
                   generator: torch.Generator | None = None) -> torch.Tensor:
        """One WGAN-GP Adam step of critics s..e-1; real_x, fake_x (e-s, b, *in_shape), real_y (e-s, b) (the fakes
        carry the real labels, as in the reference). Returns the losses (e-s,)."""
        self.steps[s:e] += 1
        return self.adam_step(self.stacked(self.params, s, e), self.stacked(self.exp_avg, s, e),
                              self.stacked(self.exp_avg_sq, s, e), self.steps[s:e], real_x, real_y, fake_x, generator)

    def adam_step(self, theta: dict, exp_avg: dict, exp_avg_sq: dict, steps: torch.Tensor, real_x: torch.Tensor,
                  real_y: torch.Tensor, fake_x: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """One WGAN-GP Adam step of the stacked critics `theta` with their moments, in place; `steps` (n,) already
        counts this step. Returns the losses (n,)."""
        alpha = torch.rand(real_x.shape[:2] + (1,) * len(self.in_shape), generator=generator, dtype=real_x.dtype)
        grads, losses = vmap(torch.func.grad_and_value(self.loss))(theta, real_x, real_y, fake_x, alpha.to(real_x))
        adam_update(theta, grads, exp_avg, exp_avg_sq, steps, self.lr, self.betas)
        return losses.detach()

    def pretrain(self, sample_real, steps: int = 2000, critic_steps: int = 5, z_dim: int = 10,
                 generator_hidden: Sequence[int] = (128,), seed: int = 0, resume: dict | None = None,
                 save: Callable[[dict], None] | None = None, save_every_s: float = 600.0) -> None:
        """GS-WGAN's non-private warm start: every critic trains against its OWN small FC generator (so critic i
        depends on its shard only), `steps` generator iterations of `critic_steps` critic steps each, chunk by
        chunk. `sample_real(s, e)` -> (x (e-s, b, *in_shape), y (e-s, b)) from the shards of critics s..e-1.

        Resumable: every `save_every_s` seconds `save(progress)` is called, where `progress` (the chunk under way,
        its completed steps, its generators with their Adam moments, the random state) together with this module's
        state_dict is all a later `pretrain(..., resume=progress)` needs to go on where it stopped."""
        device = self.steps.device
        net = FCGenerator(self.in_shape, self.num_classes, z_dim=z_dim, hidden=tuple(generator_hidden),
                          activation="relu", feature_bound=None, label_every_layer=False)
        fake = vmap(lambda th, z, y: functional_call(net, th, (z, y)))

        def g_loss(th, d_theta, z1, y1):
            return -self.critic(d_theta, functional_call(net, th, (z1, y1)), y1).mean()

        rng = torch.Generator()  # on the CPU: draws are moved to the critics' device
        if resume is None:
            rng.manual_seed(seed)
        else:
            rng.set_state(resume["rng"])
        start = last_save = time.perf_counter()
        for s, e in self.chunks():
            if resume is not None and s < resume["chunk"]:
                continue
            if resume is not None and s == resume["chunk"]:  # the chunk that was under way (no step left: none run)
                done = resume["step"]
                g_theta, g_m, g_v = ({k: v.to(device) for k, v in resume[part].items()}
                                     for part in ("generators", "exp_avg", "exp_avg_sq"))
            else:
                done = 0
                g_theta = {k: v.to(device) for k, v in stacked_init(net, e - s, rng).items()}
                g_m = {k: torch.zeros_like(v) for k, v in g_theta.items()}
                g_v = {k: torch.zeros_like(v) for k, v in g_theta.items()}
            for step in track(range(done + 1, steps + 1), description=f"pretraining critics {s}-{e - 1} of {self.n}"):
                for _ in range(critic_steps):
                    real_x, real_y = sample_real(s, e)
                    z = (torch.rand(real_y.shape + (z_dim,), generator=rng) * 2 - 1).to(device)
                    with torch.no_grad():
                        fake_x = fake(g_theta, z, real_y)
                    self.train_step(s, e, real_x, real_y, fake_x, rng)
                y = torch.randint(0, self.num_classes, real_y.shape, generator=rng).to(device)
                z = (torch.rand(real_y.shape + (z_dim,), generator=rng) * 2 - 1).to(device)
                g_grads = vmap(grad(g_loss))(g_theta, self.stacked(self.params, s, e), z, y)
                adam_update(g_theta, g_grads, g_m, g_v, torch.full((e - s,), step, device=device), self.lr, self.betas)
                if step % max(1, steps // 10) == 0:  # the progress bar does not reach a log file
                    log.info("pretraining critics %d-%d of %d: step %d of %d, %.0f s", s, e - 1, self.n, step, steps,
                             time.perf_counter() - start)
                if save is not None and time.perf_counter() - last_save >= save_every_s:
                    save({"chunk": s, "step": step, "generators": g_theta, "exp_avg": g_m, "exp_avg_sq": g_v,
                          "rng": rng.get_state()})
                    last_save = time.perf_counter()
