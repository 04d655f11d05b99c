"""Throwaway probe (issue 84, item 2): does a classifier of the private data, used on the generator's side only,
lift DP-MERF's samples? Stages, each optional:
  teacher:  a small CNN (Tramer & Boneh's MNIST CNN, tanh) trained with DP-SGD (Opacus; --sigma 0: the noise-free
            control, clipping kept) on the training split; its real-test accuracy.
  finetune: a DP-MERF generator (generator.pt of a run) trained further on loss = MMD^2(release) + lam * CE(teacher(G(z, y)), y)
            (post-processing of the release and of the teacher).
  eval:     60,000 samples (labels balanced; --relabel: the teacher's argmax instead), the downstream CNN 5 epochs,
            synthetic hold-out selection, real test set (the protocol of experiments/dpmerf_ceiling).
Usage: probe.py --out DIR [--sigma S] [--epochs E] [--generator RUN/generator.pt] [--release-eps E] [--lam L] ..."""
import argparse
import json
import time
from pathlib import Path

import torch
from opacus import PrivacyEngine
from torch import nn

from dpgen.data.mnist import MNISTDataModule
from dpgen.evaluation.downstream import image_accuracy
from dpgen.evaluation.training import accuracy
from dpgen.methods.dpmerf import DPMERF
from dpgen.nn.generator import generate
from dpgen.privacy import pld


def teacher_net():
    return nn.Sequential(nn.Conv2d(1, 16, 8, 2, padding=3), nn.Tanh(), nn.MaxPool2d(2, 1),
                         nn.Conv2d(16, 32, 4, 2), nn.Tanh(), nn.MaxPool2d(2, 1), nn.Flatten(),
                         nn.Linear(32 * 4 * 4, 32), nn.Tanh(), nn.Linear(32, 10))


def train_teacher(dm, args):
    x, y = dm.train_data[:]
    data = torch.utils.data.TensorDataset(x.float(), y.long())
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch, shuffle=True)
    net = teacher_net()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    engine = PrivacyEngine(accountant="rdp")
    net, opt, loader = engine.make_private(module=net, optimizer=opt, data_loader=loader,
                                           noise_multiplier=max(args.sigma, 1e-6), max_grad_norm=args.clip,
                                           poisson_sampling=True)
    q = args.batch / len(data)
    steps = 0
    for epoch in range(args.epochs):
        t = time.time()
        for bx, by in loader:
            if len(by) == 0:
                continue
            opt.zero_grad()
            nn.functional.cross_entropy(net(bx), by).backward()
            opt.step()
            steps += 1
        acc = accuracy(net._module, *dm.test_data[:])
        print(f"teacher epoch {epoch + 1}: test {acc:.4f} ({time.time() - t:.0f} s)", flush=True)
    clean = teacher_net()  # the weights without Opacus' hooks
    clean.load_state_dict(net._module.state_dict())
    return clean.eval(), q, steps, acc


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--sigma", type=float, default=0.0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--clip", type=float, default=0.1)
    p.add_argument("--generator")
    p.add_argument("--teacher")
    p.add_argument("--release-eps", type=float, default=10000.0)
    p.add_argument("--lam", type=float, default=0.0)
    p.add_argument("--steps", type=int, default=0)
    p.add_argument("--relabel", action="store_true")
    p.add_argument("--filter", action="store_true")
    p.add_argument("--eval-epochs", type=int, default=5)
    args = p.parse_args()
    torch.manual_seed(0)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dm = MNISTDataModule(batch_size=500)
    dm.setup()
    result = {"args": vars(args)}
    t0 = time.time()
    if args.teacher:
        saved = torch.load(args.teacher, weights_only=False)
        teacher = teacher_net()
        teacher.load_state_dict(saved["state"] if "state" in saved else saved["net"].state_dict())
        teacher, q, steps, acc = teacher.eval(), saved["q"], saved["steps"], saved["accuracy"]
    else:
        teacher, q, steps, acc = train_teacher(dm, args)
        torch.save({"state": teacher.state_dict(), "q": q, "steps": steps, "accuracy": acc}, out / "teacher.pt")
    result.update(teacher_accuracy=acc, teacher_steps=steps, teacher_seconds=time.time() - t0, q=q)
    module = DPMERF((1, 28, 28), 10, "image", epsilon=args.release_eps, delta=1e-5)
    module.release_embedding(dm.train_data)
    mu_release = module.sensitivity / module.sigma
    if args.sigma > 0:
        result["epsilon_pld"] = pld.epsilon_pld([(pld.gaussian_of_mu(mu_release), 1),
                                                 (pld.dpsgd_event(q, args.sigma), steps)], 1e-5)
        result["epsilon_teacher_alone"] = pld.epsilon_pld([(pld.dpsgd_event(q, args.sigma), steps)], 1e-5)
    print(json.dumps(result), flush=True)
    if not args.generator:
        return
    rel = torch.load(args.generator, map_location="cpu", weights_only=False)
    g = rel["generator"]
    g.train()
    for prm in teacher.parameters():
        prm.requires_grad_(False)
    opt = torch.optim.Adam(g.parameters(), lr=1e-3)
    t1 = time.time()
    for step in range(args.steps):
        y = torch.arange(500) % 10
        x = g(torch.randn(500, rel["z_dim"]), y)
        mmd = module.embedding_loss(x, y)
        ce = nn.functional.cross_entropy(teacher(x), y)
        loss = mmd + args.lam * ce
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step}: mmd {mmd.item():.5f} ce {ce.item():.4f}", flush=True)
    result["finetune_seconds"] = time.time() - t1
    y = torch.arange(60_000) % 10
    with torch.no_grad():
        x = generate(g, y, rel["z_dim"], rel["latent_dist"], 1000, None)
        pred = torch.cat([teacher(c).argmax(1) for c in x.split(1000)])
        result["teacher_agreement"] = (pred == y).float().mean().item()
        if args.filter:  # keep the samples the teacher reads as their label, fresh draws for the others
            xs, ys = [x[pred == y]], [y[pred == y]]
            while sum(map(len, ys)) < 60_000:
                yb = torch.arange(10_000) % 10
                xb = generate(g, yb, rel["z_dim"], rel["latent_dist"], 1000, None)
                ok = torch.cat([teacher(c).argmax(1) for c in xb.split(1000)]) == yb
                xs.append(xb[ok])
                ys.append(yb[ok])
            x, y = torch.cat(xs)[:60_000], torch.cat(ys)[:60_000]
            pred = y
    if args.relabel:
        y = pred
    torch.save({"x": (x * 255).round().to(torch.uint8), "y": y}, out / "samples.pt")
    test_x, test_y = dm.test_data[:]
    ev = image_accuracy(x, y, test_x, test_y, num_classes=10, max_epochs=args.eval_epochs, progress=False)
    result.update(downstream_synthetic=ev["accuracy"], downstream_max_test=ev["max_test_accuracy"])
    print(json.dumps(result), flush=True)
    (out / "result.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
