"""Where PATE-GAN's score vote loses the signal: does the student learn the direction in which the teachers' score
rises, given enough steps?

    python experiments/pategan_student_probe.py RUN_DIR [--steps 2000] [--every 250] [--perturb 0] [--out probe.json]

RUN_DIR is a `method.module.vote=score` run with a checkpoint (RUN_DIR/checkpoints/last.ckpt). Its generator and
teachers are frozen as they were there; its student is trained on, exactly as in the run (fresh generated samples,
the teachers' mean clipped score without noise, the centred squared error, the run's Adam), for --steps steps. Every
--every steps, on 256 fixed generated samples: the cosine between the student's input gradient and that of the
teachers' mean clipped score (per sample, and of their sums over the batch, which is what the generator's step
follows), and R^2 of the student's centred scores against the teachers'; once, the same cosines between the two
halves of the teachers, how much they agree on the direction. For a run with the basis generator
(`generator.basis_size`), also the cosines of the gradients with respect to the generator's k^2 coefficients of each
sample (the only directions its steps can move a sample in: `tangent`). With --perturb s > 0 the student is trained on the
generated samples moved by Gaussian pixel noise of a standard deviation drawn uniformly from [0, s] per sample (the
teachers scoring the moved samples), and measured, as always, on unmoved ones; with --perturb-coefficients the
noise moves the basis generator's coefficients instead, so the moved samples stay in its image set. Not private: a measurement of a
noise-free control's state.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import yaml
from hydra import compose, initialize_config_dir
from torch.nn.functional import cosine_similarity

from dpgen.cli.common import CONF_DIR
from dpgen.cli.train import build_datamodule, build_method


def load(run: Path):
    overrides = [o for o in yaml.safe_load((run / ".hydra/overrides.yaml").read_text())
                 if not o.startswith(("resume=", "hydra."))]
    with initialize_config_dir(str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    model = build_method(cfg, build_datamodule(cfg))
    state = torch.load(run / "checkpoints/last.ckpt", map_location="cpu", weights_only=False)
    model.load_state_dict(state["state_dict"])
    if model.vote != "score":
        raise SystemExit(f"error: {run} is not a vote=score run")
    return model, state


def teacher_score(model, x: torch.Tensor, y: torch.Tensor, s: int = 0, e: int | None = None) -> torch.Tensor:
    """The mean clipped score of teachers s..e-1 (default: all) on each sample, differentiable in x."""
    ens = model.ensemble
    e = ens.n_teachers if e is None else e
    logits = ens.logits(ens.stacked(ens.params, s, e), x.expand(e - s, *x.shape), y.expand(e - s, len(y)))
    return logits.clamp(-model.score_clip, model.score_clip).mean(0)


def input_grad(f, x: torch.Tensor) -> torch.Tensor:
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(f(x).sum(), x)
    return g


def cosines(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """Mean cosine of two (n, ...) gradients per sample, and cosine of their sums over the batch."""
    return (float(cosine_similarity(a.flatten(1), b.flatten(1)).mean()),
            float(cosine_similarity(a.sum(0).flatten(), b.sum(0).flatten(), dim=0)))


def tangent(model, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """A pixel gradient g at samples x = sigmoid(a) of the basis generator as a gradient with respect to each
    sample's coefficients c (a = basis^T c): basis (x (1 - x) g)."""
    n, channels = len(x), x.shape[1]
    return ((x * (1 - x) * g).view(n, channels, -1) @ model.net_g.basis.T).view(n, -1)


def measure(model, x: torch.Tensor, y: torch.Tensor) -> dict:
    g_teachers = input_grad(lambda v: teacher_score(model, v, y), x)
    g_student = input_grad(lambda v: model.student(v, y).view(-1), x)
    with torch.no_grad():
        t, s = teacher_score(model, x, y), model.student(x, y).view(-1)
    t, s = t - t.mean(), s - s.mean()
    row = dict(zip(("cosine_per_sample", "cosine_batch_sum"), cosines(g_teachers, g_student)))
    if hasattr(model.net_g, "basis"):
        row |= dict(zip(("tangent_cosine_per_sample", "tangent_cosine_batch_sum"),
                        cosines(tangent(model, x, g_teachers), tangent(model, x, g_student))))
    return {**row, "r2": float(1 - ((s - t) ** 2).mean() / (t ** 2).mean()), "score_std": float(t.std())}


def teacher_halves(model, x: torch.Tensor, y: torch.Tensor) -> dict:
    """How much the teachers agree on the direction: the same cosines between the gradients of the mean scores of
    the first and the second half of the teachers (two disjoint halves of the data)."""
    half = model.ensemble.n_teachers // 2
    first = input_grad(lambda v: teacher_score(model, v, y, 0, half), x)
    second = input_grad(lambda v: teacher_score(model, v, y, half), x)
    row = dict(zip(("halves_cosine_per_sample", "halves_cosine_batch_sum"), cosines(first, second)))
    if hasattr(model.net_g, "basis"):
        row |= dict(zip(("halves_tangent_cosine_per_sample", "halves_tangent_cosine_batch_sum"),
                        cosines(tangent(model, x, first), tangent(model, x, second))))
    return row


def training_batch(model, perturb: float, coefficients: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of generated samples for the student, each moved by Gaussian noise of a standard deviation drawn
    uniformly from [0, perturb]: on its pixels, or (`coefficients`, the basis generator) on its coefficients, so
    the moved sample stays in the generator's image set."""
    if coefficients:
        y = model.random_labels(model.batch_size)
        c = model.net_g.coefficients(model.latent(model.batch_size), y)
        return model.net_g.decode(c + perturb * torch.rand(len(c), 1, 1) * torch.randn_like(c)), y
    u, y = model.generated(model.batch_size)
    return u + perturb * torch.rand(len(u), *[1] * (u.dim() - 1)) * torch.randn_like(u), y


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--every", type=int, default=250)
    parser.add_argument("--perturb", type=float, default=0.0)
    parser.add_argument("--perturb-coefficients", action="store_true",
                        help="move the basis generator's coefficients instead of the pixels")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    model, state = load(args.run)
    model.net_g.requires_grad_(False)
    opt = torch.optim.Adam(model.student.parameters(), lr=model.lr, betas=(model.beta1, 0.999))
    if state.get("optimizer_states"):
        opt.load_state_dict(state["optimizer_states"][1])
    torch.manual_seed(0)
    with torch.no_grad():
        x_eval, y_eval = model.generated(256)
    halves = teacher_halves(model, x_eval, y_eval)
    print(json.dumps(halves), flush=True)
    rows = []
    for step in range(args.steps + 1):
        if step % args.every == 0:
            rows.append({"student_steps": step, **measure(model, x_eval, y_eval)})
            print(json.dumps(rows[-1]), flush=True)
        if step == args.steps:
            break
        with torch.no_grad():
            u, y = training_batch(model, args.perturb, args.perturb_coefficients)
            target = teacher_score(model, u, y)
        score = model.student(u, y).view(-1)
        loss = ((score - score.mean() - (target - target.mean())) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    result = {"run": str(args.run), "global_step": state["global_step"], "perturb": args.perturb,
              "perturb_coefficients": args.perturb_coefficients, **halves,
              "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
