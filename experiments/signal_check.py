"""`python experiments/signal_check.py`: how much of the teachers' signal reaches G-PATE's generator, the G-PATE loop
without Lightning or the privacy budget (docs/GPATE.md).

Each step is G-PATE Algorithm 1 (one fake batch, one Adam step per teacher, the teachers' input gradients),
with the aggregation chosen by --agg: `mean` (the plain mean of the teachers' gradients, no privacy: the upper
bound of what the teachers know) or `dpgradagg` (Algorithm 2 with the given clip / bins / projection / noise;
sigma1 = sigma2 = 1e-3 is the noise-free limit). Every --every steps it prints, as one JSON line: the teachers'
loss, the share of answered queries, the mean vote share of the top bin and of the two extreme bins (the
teachers' consensus), and the label accuracy of --samples samples (100: 10 per class) under the cached MNIST domain
classifier, with the generator's BatchNorm in eval mode (running statistics, as `sample()`) and in training
mode (batch statistics, as the reference code generates), and for `dpgradagg` the epsilon spent so far
(delta = 1e-5, both bounds). Sample grids go to --out.

    OMP_NUM_THREADS=1 python experiments/signal_check.py --agg mean --teachers 200
    OMP_NUM_THREADS=1 python experiments/signal_check.py --agg dpgradagg --clip 1e-6 --teachers 200 \
        --channels 11 16 --hidden 64 --steps 600
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
from torchvision.utils import save_image

from dpgen.aggregation.dpgradagg import DPGradAggParams, dp_grad_agg
from dpgen.data.mnist import MNISTDataModule
from dpgen.evaluation.fidelity import domain_classifier_for
from dpgen.nn.ensemble import TeacherEnsemble
from dpgen.nn.generator import ConditionalImageGenerator, label_pool, latent
from dpgen.privacy.rdp import DEFAULT_ORDERS, eps_from_rdp


def parse_args(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agg", choices=["mean", "dpgradagg"], default="mean")
    p.add_argument("--teachers", type=int, default=200)
    p.add_argument("--batch", type=int, default=15, help="per-teacher real batch = fake batch")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--every", type=int, default=50)
    p.add_argument("--clip", type=float, default=1e-4)
    p.add_argument("--bins", type=int, default=10)
    p.add_argument("--proj", type=int, default=10, help="projection dims k; 0 = no projection")
    p.add_argument("--sigma1", type=float, default=1e-3)
    p.add_argument("--sigma2", type=float, default=1e-3)
    p.add_argument("--threshold", type=float, default=0.5, help="T, a fraction of the teachers")
    p.add_argument("--teacher-lr", type=float, default=1e-3, help="teachers' Adam learning rate")
    p.add_argument("--augment", type=int, default=0, help="teachers train on images shifted by up to this many pixels")
    p.add_argument("--teacher-steps", type=int, default=1, help="teacher Adam steps per generator step")
    p.add_argument("--channels", type=int, nargs="*", default=None, help="teacher conv channels (default: the reference teacher's)")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--joint-batch-norm", action="store_true")
    p.add_argument("--pool", type=int, default=1,
                   help="teachers see the image average-pooled P x P (method.module.teachers.pool)")
    p.add_argument("--moment-dtype", choices=["bfloat16", "float32"], default="bfloat16",
                   help="dtype of the teachers' Adam moments")
    p.add_argument("--compute-dtype", choices=["bfloat16", "float32"], default="float32",
                   help="the teachers' forward and backward passes (TeacherEnsemble compute_dtype)")
    p.add_argument("--z-dim", type=int, default=100)
    p.add_argument("--g-lr", type=float, default=1e-3)
    p.add_argument("--g-beta1", type=float, default=0.5, help="the generator's Adam beta1 (the reference's 0.5)")
    p.add_argument("--samples", type=int, default=100, help="samples whose labels are checked, a multiple of 10")
    p.add_argument("--ema", type=float, default=0.0,
                   help="also check an exponential moving average of the generator's weights with this decay")
    p.add_argument("--gen-steps", type=int, default=1,
                   help="generator Adam steps towards one released target G(z) + aggregate (post-processing)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", help="torch device of the loop (cpu, cuda)")
    p.add_argument("--chunk", type=int, default=50, help="teachers per chunk (TeacherEnsemble chunk_size)")
    p.add_argument("--out", default="outputs/gpate_signal_check")
    p.add_argument("--smooth", type=int, default=0,
                   help="S > 0: low-frequency projection directions drawn on an S x S grid "
                        "(method.module.aggregator.smooth; not Algorithm 2's i.i.d. entries)")
    p.add_argument("--records", type=int, default=0,
                   help="N > 0: each teacher keeps only N records (4000 teachers of MNIST have 15 each)")
    p.add_argument("--init", choices=["torch", "dcgan"], default="torch", help="generator initialisation")
    p.add_argument("--align", choices=["torch", "tf"], default="torch", help="generator deconvolution alignment")
    p.add_argument("--label-matched", action="store_true",
                   help="teachers train on fakes drawn with their own real labels (method.module.label_matched_fakes)")
    p.add_argument("--shared-init", action="store_true", help="all teachers start from the same weights")
    p.add_argument("--moment-slots", type=int, default=None,
                   help="teachers share Adam moments in this many slots, as the reference code (not private)")
    return p.parse_args(argv)


def label_accuracy(gen, classifier, z, y, batch: int, train_mode: bool):
    """Share of samples the domain classifier assigns to their conditioning label, and the samples."""
    gen.train(train_mode)
    with torch.no_grad():
        size = batch if train_mode else len(y)  # batch statistics over batches of b, as the reference samples
        x = torch.cat([gen(z[i:i + size], y[i:i + size]) for i in range(0, len(y), size)])
    gen.train(True)
    return (classifier(x).argmax(1) == y).float().mean().item(), x


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    torch.manual_seed(a.seed)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    train, test = MNISTDataModule(download=False).load()
    dev = torch.device(a.device)
    classifier, _ = domain_classifier_for("mnist", train.x, train.y, test.x, test.y, num_classes=10,
                                          device=dev, progress=False)
    classifier = classifier.to(dev)
    x, y = train.x.to(dev), train.y.to(dev)
    # equal disjoint slices of a seeded permutation (a measurement, nothing is released; training hashes records)
    equal = len(x) // a.teachers
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(a.seed))
    size = min(equal, a.records or equal)
    parts = order[:a.teachers * equal].view(a.teachers, equal)[:, :size].to(dev)
    b = min(a.batch, size)
    arch = {"hidden": a.hidden} | ({"channels": a.channels} if a.channels is not None else {})
    ensemble = TeacherEnsemble(a.teachers, (1, 28, 28), 10, lr=a.teacher_lr, augment=a.augment, joint_batch_norm=a.joint_batch_norm,
                               moment_dtype=a.moment_dtype, compute_dtype=a.compute_dtype, pool=a.pool,
                               shared_init=a.shared_init, seed=a.seed, moment_slots=a.moment_slots, chunk_size=a.chunk,
                               **arch).to(dev)
    gen = ConditionalImageGenerator((1, 28, 28), 10, z_dim=a.z_dim, init=a.init, align=a.align).to(dev)
    ema = (torch.optim.swa_utils.AveragedModel(gen, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(a.ema),
                                               use_buffers=True) if a.ema else None)
    opt = torch.optim.Adam(gen.parameters(), lr=a.g_lr, betas=(a.g_beta1, 0.999))
    agg = DPGradAggParams(clip=a.clip, bins=a.bins, proj_dim=a.proj or None, sigma1=a.sigma1, sigma2=a.sigma2,
                          threshold=a.threshold, smooth=a.smooth or None)
    orders = np.asarray(DEFAULT_ORDERS, dtype=float)
    z_fixed, y_fixed = latent(a.samples, a.z_dim, device=dev), torch.arange(10, device=dev).repeat(a.samples // 10)
    spent = {"data_dependent": np.zeros_like(orders), "data_independent": np.zeros_like(orders)}
    start = time.time()
    for step in range(1, a.steps + 1):
        for _ in range(a.teacher_steps):  # the last fake batch is the one the teachers are asked about
            rows = torch.arange(a.teachers, device=dev)[:, None]
            idx = parts if b == size else parts[rows, torch.randint(size, (a.teachers, b), device=dev)]
            real_x, real_y = x[idx], y[idx]
            fake_y = torch.randint(0, 10, (b,), device=dev)
            z = latent(b, a.z_dim, device=dev)
            fake = gen(z, fake_y)
            if a.label_matched:
                d_loss = ensemble.train_step(real_x, real_y, label_pool(gen, z, 10), real_y, by_label=True)
            else:
                d_loss = ensemble.train_step(real_x, real_y, fake.detach(), fake_y)
        grads = -ensemble.input_grads(fake.detach(), fake_y, real_x, real_y)
        # |u|: the teachers' gradients on k Gaussian N(0, 1/k) directions per sample (Algorithm 2's projection)
        directions = torch.randn(b, grads.shape[2], max(a.proj, 1), device=dev) / max(a.proj, 1) ** 0.5
        u = torch.einsum("tbd,bdk->tbk", grads, directions).abs().flatten()
        q = torch.quantile(u[torch.randperm(len(u), device=dev)[:100_000]],
                           torch.tensor([0.1, 0.5, 0.9], device=dev)).tolist()
        stats = {"u_q10_50_90": [float(f"{v:.2g}") for v in q]}
        if a.agg == "mean":
            private = grads.mean(0)
        else:
            private, release = dp_grad_agg(grads, agg, orders, shape=(1, 28, 28))
            share = release.votes / a.teachers
            for bound in spent:
                spent[bound] += release.rdp[bound]
                stats[f"eps_{bound}"] = round(eps_from_rdp(spent[bound], orders, 1e-5)[0], 3)
            stats |= {"answered": float(release.answered.mean()), "top_share": float(share.max(1).mean()),
                     "extreme_share": float((share[:, 0] + share[:, -1]).mean())}
        target = (fake + private.view_as(fake)).detach()  # equation 2's x_hat, released once
        for i in range(a.gen_steps):  # step 0 on the batch already drawn; further ones redraw it
            g_loss = (((fake if i == 0 else gen(z, fake_y)) - target) ** 2).sum()
            opt.zero_grad()
            g_loss.backward()
            opt.step()
        if ema is not None:
            ema.update_parameters(gen)
        if step % a.every == 0 or step == 1:
            acc_eval, x_eval = label_accuracy(gen, classifier, z_fixed, y_fixed, b, train_mode=False)
            acc_train, x_train = label_accuracy(gen, classifier, z_fixed, y_fixed, b, train_mode=True)
            if ema is not None:
                stats["label_acc_ema"], x_ema = label_accuracy(ema.module, classifier, z_fixed, y_fixed, b, train_mode=False)
                save_image(x_ema[:100], out / f"ema_{step:05d}.png", nrow=10)
            save_image(x_eval[:100], out / f"eval_{step:05d}.png", nrow=10)
            save_image(x_train[:100], out / f"train_{step:05d}.png", nrow=10)
            print(json.dumps({"step": step, "teacher_loss": round(float(d_loss.mean()), 4), **stats,
                              "label_acc_eval": acc_eval, "label_acc_train": acc_train,
                              "seconds": round(time.time() - start)}), flush=True)


if __name__ == "__main__":
    main()
