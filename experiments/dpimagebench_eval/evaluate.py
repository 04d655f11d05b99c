"""Score a synthetic MNIST / Fashion-MNIST set the way the DPImageBench benchmark does (2019ChenGong/DPImageBench,
evaluation/evaluator.py `cal_acc` at commit 565f8d7), re-implemented for dpgen: three classifiers (WRN-40-4,
ResNet-110, ResNeXt-29 8x64d; nets.py) each trained on 55,000 synthetic records (Adam 0.01, StepLR 20 / 0.2, 50
epochs, batch 256, an EMA of the parameters used for evaluation), each epoch scored on the private validation split
and the real test set; per classifier the test accuracy at the best validation epoch (DPImageBench's number), at the
best Laplace-noised validation count, and the best test accuracy; the mean and std of each over the classifiers.
README.md beside this file says what differs from DPImageBench.

    evaluate.py --run RUN_DIR --data mnist --out DIR [--models wrn,resnet,resnext] [--epochs 50 --step 20]
    evaluate.py --synthetic FILE.npz --data fashion_mnist --out DIR --eps 1

Resumable: every epoch saves DIR/state_<model>.pt; the same command continues from it, and a classifier with
DIR/result_<model>.json is skipped. DIR/dpimagebench_eval.json is rewritten after every epoch.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nets import NETS, build, n_params  # noqa: E402

PROTOCOL = ("DPImageBench downstream accuracy, evaluation/evaluator.py Evaluator.cal_acc of 2019ChenGong/DPImageBench "
            "at commit 565f8d7 (MNIST / Fashion-MNIST branch), re-implemented")
DPIB_ORDER = ("resnet", "wrn", "resnext")  # the order of DPImageBench's acc_models
SELECTIONS = ("val", "noisy_val", "test")
EVAL_BATCH = 1000


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", type=Path, help="a folder written by train.py (generator.pt): samples are drawn from it")
    src.add_argument("--synthetic", type=Path, help="an .npz written by generate.py (keys x, y)")
    ap.add_argument("--data", required=True, choices=("mnist", "fashion_mnist"))
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--models", default="wrn,resnet,resnext", help=f"comma-separated, of {','.join(NETS)}")
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--step", type=int, default=20, help="StepLR step size in epochs (gamma 0.2)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--n-train", type=int, default=55000, help="the first N of the permuted synthetic set")
    ap.add_argument("--n-test", type=int, default=None, help="smoke checks only: score on the first N test records "
                    "(default all 10,000, the protocol)")
    ap.add_argument("--n-samples", type=int, default=60000, help="--run: how many samples to draw")
    ap.add_argument("--sample-seed", type=int, default=0, help="--run: seed of sample() (generate.py's default 0)")
    ap.add_argument("--sample-batch", type=int, default=1000, help="--run: sampling batch size")
    ap.add_argument("--eps", type=float, default=None, help="Laplace scale 1/eps of the noisy validation selection; "
                    "default the epsilon of the run's privacy.json (--run) or of privacy.json beside the .npz")
    ap.add_argument("--val-eps-seed", type=int, default=0, help="seed of the Laplace noise")
    ap.add_argument("--seed", type=int, default=0, help="torch seed: initialisation, shuffling, dropout")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:i]")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    a = ap.parse_args()
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    unknown = [m for m in a.models if m not in NETS]
    if unknown or not a.models:
        ap.error(f"--models: unknown {unknown}; choose from {list(NETS)}")
    if a.epochs < 1 or a.step < 1 or a.n_train < 1 or a.batch_size < 1:
        ap.error("--epochs, --step, --n-train and --batch-size must be >= 1")
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device {a.device}: CUDA is not available")
    return a


def read_privacy(path: Path) -> dict | None:
    return json.loads(path.read_text()) if path.is_file() else None


def load_synthetic(a: argparse.Namespace) -> tuple[torch.Tensor, torch.Tensor, dict, dict | None]:
    """(x float32 (N,1,28,28) in [0,1], y int64, description, privacy.json or None)."""
    if a.run is not None:
        from dpgen.cli.generate import load_release, sample
        release = load_release(a.run)
        if release.get("data_name") != a.data:
            raise SystemExit(f"{a.run} was trained on {release.get('data_name')!r}, not --data {a.data}")
        start = time.time()
        x, y = sample(release, a.n_samples, a.sample_seed, a.sample_batch)
        desc = {"kind": "run", "path": str(a.run), "n_samples": a.n_samples, "sample_seed": a.sample_seed,
                "sample_batch": a.sample_batch, "relabelled_by_guide": release.get("labeller") is not None,
                "generator": type(release["generator"]).__name__, "sampling_seconds": round(time.time() - start, 1)}
        privacy = read_privacy(a.run / "privacy.json")
    else:
        with np.load(a.synthetic) as f:
            x, y = torch.from_numpy(f["x"]).float(), torch.from_numpy(f["y"]).long()
        desc = {"kind": "npz", "path": str(a.synthetic)}
        privacy = read_privacy(a.synthetic.parent / "privacy.json")
    x, y = x.detach().float().reshape(len(x), 1, 28, 28).contiguous(), y.detach().long().flatten()
    if len(x) != len(y):
        raise SystemExit(f"{len(x)} images but {len(y)} labels")
    if int(y.min()) < 0 or int(y.max()) > 9:
        raise SystemExit(f"labels must be in 0..9, got {int(y.min())}..{int(y.max())}")
    digest = hashlib.sha256(x.numpy().tobytes() + y.numpy().tobytes()).hexdigest()
    desc.update(n=len(x), sha256=digest, x_min=float(x.min()), x_max=float(x.max()),
                label_counts=torch.bincount(y, minlength=10).tolist())
    return x, y, desc, privacy


def load_real(data: str, privacy: dict | None) -> tuple[tuple, tuple, dict]:
    """The private validation split (held out from the generator's training) and the real test set, loaded as
    experiments/dpmerf_guide/guide_probe.py does; the split's fraction and seed from privacy.json when it records
    them, its descriptor checked against privacy.json's."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from dpgen.cli.common import CONF_DIR, data_hash
    with initialize_config_dir(str(CONF_DIR), version_base=None):
        cfg = compose("config", [f"data={data}", "eval.selection=private_val"])
    recorded = ((privacy or {}).get("records") or {}).get("private_val")
    fraction = float(recorded["fraction"]) if recorded else float(cfg.eval.private_val.fraction)
    seed = int(recorded["seed"]) if recorded else 0
    dm = instantiate(cfg.data, batch_size=256, seed=seed, private_val=fraction, data_hash=data_hash(cfg))
    dm.setup("fit")
    descriptor = dm.private_val_split_descriptor
    if not recorded:
        print(f"WARNING: no privacy.json records a private validation split: using {descriptor}, which the "
              "generator may have trained on", flush=True)
    elif recorded != descriptor:
        print(f"WARNING: the private validation split {descriptor} differs from the one privacy.json records "
              f"{recorded}", flush=True)
    val, test = dm.private_val_data[:], dm.test_data[:]
    info = {"split": descriptor, "matches_privacy_json": (recorded == descriptor) if recorded else None,
            "val_records": len(val[1]), "val_label_counts": torch.bincount(val[1], minlength=10).tolist(),
            "test_records": len(test[1]), "dpimagebench_val_records": 5000}
    return val, test, info


class EMA:
    """Moving average of the trainable parameters (not the BN buffers), DPImageBench's evaluation/ema.py rule:
    update k (k = 1, 2, ...) uses decay min(0.9999, (1 + k) / (10 + k))."""

    def __init__(self, params, decay: float = 0.9999):
        self.params = [p for p in params if p.requires_grad]
        self.shadow = [p.detach().clone() for p in self.params]
        self.decay, self.updates, self.saved = decay, 0, None

    @torch.no_grad()
    def update(self) -> None:
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        for s, p in zip(self.shadow, self.params):
            s.lerp_(p.detach(), 1.0 - d)  # s - (1 - d) * (s - p)

    @torch.no_grad()
    def swap_in(self) -> None:
        self.saved = [p.detach().clone() for p in self.params]
        for s, p in zip(self.shadow, self.params):
            p.copy_(s)

    @torch.no_grad()
    def swap_out(self) -> None:
        for s, p in zip(self.saved, self.params):
            p.copy_(s)
        self.saved = None

    def state_dict(self) -> dict:
        return {"shadow": [s.cpu() for s in self.shadow], "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        for s, t in zip(self.shadow, state["shadow"]):
            s.copy_(t)
        self.updates = int(state["updates"])


@torch.no_grad()
def correct_count(model, x: torch.Tensor, y: torch.Tensor, device) -> int:
    hits = 0
    for i in range(0, len(x), EVAL_BATCH):
        out = model(x[i:i + EVAL_BATCH].to(device) * 2 - 1)
        hits += int((out.argmax(1) == y[i:i + EVAL_BATCH].to(device)).sum())
    return hits


def select(history: list[dict]) -> dict:
    """DPImageBench's three choices of epoch (later epoch on ties, `>=`, from a best of 0 as in cal_acc)."""
    best = {"val": (0.0, None), "noisy_val": (0.0, None), "test": (0.0, None)}
    keys = {"val": "val_acc", "noisy_val": "noisy_val_correct", "test": "test_acc"}
    for h in history:
        for sel, key in keys.items():
            if h[key] >= best[sel][0]:
                best[sel] = (h[key], h)
    out = {}
    for sel, key in keys.items():
        score, h = best[sel]
        out[sel] = None if h is None else {"test_acc": h["test_acc"], "epoch": h["epoch"], key: score}
    return out


def save_atomic(obj, path: Path, as_json: bool = False) -> None:
    tmp = path.with_name(path.name + ".tmp")
    if as_json:
        tmp.write_text(json.dumps(obj, indent=1))
    else:
        torch.save(obj, tmp)
    os.replace(tmp, path)


def train_one(name: str, a, fingerprint: dict, train: tuple, val: tuple, test: tuple, report) -> dict:
    """Trains classifier `name` (continuing from its state file) and returns its result."""
    device = torch.device(a.device)
    state_path, result_path = a.out / f"state_{name}.pt", a.out / f"result_{name}.json"
    torch.manual_seed(a.seed)
    model = build(name).to(device)
    params = n_params(model)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=a.step, gamma=0.2)
    ema = EMA(model.parameters())
    shuffle = torch.Generator().manual_seed(a.seed)
    noise = np.random.default_rng([a.val_eps_seed, list(NETS).index(name)])
    history: list[dict] = []
    if state_path.is_file():
        state = torch.load(state_path, map_location=device, weights_only=False)
        if state["fingerprint"] != fingerprint:
            raise SystemExit(f"{state_path} was written with other settings: {state['fingerprint']} != {fingerprint}")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        sched.load_state_dict(state["scheduler"])
        ema.load_state_dict(state["ema"])
        shuffle.set_state(state["shuffle_rng"])
        noise.bit_generator.state = state["noise_rng"]
        torch.set_rng_state(state["torch_rng"])
        if device.type == "cuda" and state.get("cuda_rng") is not None:
            torch.cuda.set_rng_state(state["cuda_rng"], device)
        history = state["history"]
        print(f"[{name}] resumed from {state_path} after epoch {len(history)}", flush=True)
    xtr, ytr = train[0].to(device), train[1].to(device)
    n, bs = len(ytr), a.batch_size
    for epoch in range(len(history) + 1, a.epochs + 1):
        start = time.time()
        lr = opt.param_groups[0]["lr"]
        model.train()
        loss_sum, hits = 0.0, 0
        order = torch.randperm(n, generator=shuffle).to(device)
        for i in range(0, n, bs):  # the last, partial batch kept (DataLoader's drop_last=False)
            idx = order[i:i + bs]
            xb, yb = xtr[idx] * 2 - 1, ytr[idx]
            opt.zero_grad(set_to_none=True)
            out = model(xb)
            loss = F.cross_entropy(out, yb)
            loss.backward()
            opt.step()
            ema.update()
            loss_sum += loss.item() * len(idx)
            hits += int((out.argmax(1) == yb).sum())
        sched.step()
        train_seconds = time.time() - start
        model.eval()
        ema.swap_in()
        val_correct = correct_count(model, val[0], val[1], device)
        test_correct = correct_count(model, test[0], test[1], device)
        ema.swap_out()
        noisy = val_correct + float(noise.laplace(0.0, 1.0 / a.eps))
        h = {"epoch": epoch, "lr": lr, "train_loss": loss_sum / n, "train_acc": 100 * hits / n,
             "val_correct": val_correct, "val_acc": 100 * val_correct / len(val[1]),
             "noisy_val_correct": noisy, "test_acc": 100 * test_correct / len(test[1]),
             "train_seconds": round(train_seconds, 2), "seconds": round(time.time() - start, 2)}
        history.append(h)
        save_atomic({"fingerprint": fingerprint, "model": model.state_dict(), "optimizer": opt.state_dict(),
                     "scheduler": sched.state_dict(), "ema": ema.state_dict(), "shuffle_rng": shuffle.get_state(),
                     "noise_rng": noise.bit_generator.state, "torch_rng": torch.get_rng_state(),
                     "cuda_rng": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                     "history": history}, state_path)
        print(f"[{name}] epoch {epoch}/{a.epochs}  {h['seconds']:.1f} s  loss {h['train_loss']:.4f}  "
              f"val {h['val_acc']:.2f}  test {h['test_acc']:.2f}  (lr {lr:.3g})", flush=True)
        report({name: partial_result(name, params, history, a.epochs, "running")})
    result = partial_result(name, params, history, a.epochs, "finished")
    result["fingerprint"] = fingerprint
    save_atomic(result, result_path, as_json=True)
    state_path.unlink(missing_ok=True)  # the weights are not kept: ResNeXt-29's state is about 0.5 GB
    return result


def partial_result(name: str, params: int, history: list[dict], epochs: int, status: str) -> dict:
    return {"title": NETS[name][0], "params": params, "status": status, "epochs_done": len(history),
            "epochs": epochs, "seconds": round(sum(h["seconds"] for h in history), 1),
            "selections": select(history), "history": history}


def summary(results: dict) -> dict:
    done = [m for m in DPIB_ORDER + tuple(sorted(set(results) - set(DPIB_ORDER)))
            if m in results and results[m]["status"] == "finished"]
    out = {"classifiers": done}
    for sel in SELECTIONS:
        accs = [results[m]["selections"][sel]["test_acc"] for m in done if results[m]["selections"][sel]]
        out[sel] = {"per_classifier": dict(zip(done, accs)),
                    "mean": float(np.mean(accs)) if accs else None, "std": float(np.std(accs)) if accs else None}
    return out


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    a = parse()
    if a.threads:
        torch.set_num_threads(a.threads)
    a.out.mkdir(parents=True, exist_ok=True)
    x, y, synth, privacy = load_synthetic(a)
    if a.eps is None:
        if not privacy or privacy.get("epsilon") is None:
            raise SystemExit("--eps is required: no privacy.json with an epsilon beside the synthetic data")
        a.eps = float(privacy["epsilon"])
    if a.n_train > len(x):
        raise SystemExit(f"--n-train {a.n_train} > {len(x)} synthetic records")
    perm = np.random.default_rng(0).permutation(len(x))  # DPImageBench: permute, first 55,000 train, rest unused
    train = (x[perm[:a.n_train]], y[perm[:a.n_train]])
    val, test, real = load_real(a.data, privacy)
    if a.n_test is not None:
        test = (test[0][:a.n_test], test[1][:a.n_test])
        real["test_records_used"] = len(test[1])
    print(f"synthetic {synth['n']} ({synth['sha256'][:12]}), train {a.n_train}; validation {real['val_records']} "
          f"(private split), test {len(test[1])}; eps {a.eps:.4g}; models {a.models}", flush=True)
    fingerprint = {"sha256": synth["sha256"], "n_train": a.n_train, "epochs": a.epochs, "step": a.step, "lr": a.lr,
                   "batch_size": a.batch_size, "eps": a.eps, "val_eps_seed": a.val_eps_seed, "seed": a.seed,
                   "split": real["split"], "n_test": len(test[1])}
    results: dict = {}
    for m in a.models:
        path = a.out / f"result_{m}.json"
        if path.is_file():
            results[m] = json.loads(path.read_text())
            if results[m].get("fingerprint") != fingerprint:
                raise SystemExit(f"{path} was written with other settings; move it away to redo {m}")

    def report(update: dict | None = None) -> None:
        results.update(update or {})
        doc = {"protocol": PROTOCOL, "command": shlex.join([sys.executable, *sys.argv]), "cwd": os.getcwd(),
               "settings": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
                            "optimizer": "Adam (default betas, no weight decay)", "scheduler": "StepLR gamma 0.2",
                            "ema": "parameters only, decay min(0.9999, (1+k)/(10+k))", "inputs": "x * 2 - 1",
                            "permutation": "numpy default_rng(0), first n_train", "laplace_scale": 1 / a.eps},
               "synthetic": synth, "real": real,
               "environment": {"cpu": cpu_model(), "torch_threads": torch.get_num_threads(),
                               "torch": torch.__version__, "device": a.device,
                               "gpu": torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else None,
                               "host": platform.node()},
               "classifiers": results, "summary": summary(results)}
        save_atomic(doc, a.out / "dpimagebench_eval.json", as_json=True)

    report()
    for m in a.models:
        if m in results:
            print(f"[{m}] finished earlier ({results[m]['epochs_done']} epochs): skipped", flush=True)
            continue
        start = time.time()
        results[m] = train_one(m, a, fingerprint, train, val, test, report)
        print(f"[{m}] done in {time.time() - start:.0f} s: " + ", ".join(
            f"{s} {results[m]['selections'][s]['test_acc']:.2f}" for s in SELECTIONS if results[m]['selections'][s]),
            flush=True)
        report()
    s = summary(results)
    for sel in SELECTIONS:
        if s[sel]["mean"] is not None:
            print(f"{sel:9s} selection: mean {s[sel]['mean']:.2f} std {s[sel]['std']:.2f}  {s[sel]['per_classifier']}")


if __name__ == "__main__":
    main()
