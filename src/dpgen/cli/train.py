"""`python train.py method=<m> data=<d> privacy.epsilon=<eps> ...`: train one generator into its run folder."""
from __future__ import annotations

import copy
import json
import time
import warnings
from pathlib import Path
from typing import Callable

import hydra
import lightning.pytorch as pl
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from dpgen.callbacks.checkpoint_io import AtomicCheckpointIO, atomic_save
from dpgen.callbacks.free_heap import FreeHeap
from dpgen.callbacks.privacy_budget import PrivacyBudget
from dpgen.callbacks.progress_log import ProgressLog
from dpgen.callbacks.random_state import RandomState
from dpgen.callbacks.release import FreePrivateModules, Release
from dpgen.callbacks.run_clock import RunClock
from dpgen.callbacks.sample_grid import SampleGrid
from dpgen.cli.common import CONF_DIR, check_config, command_line, data_hash, fail, machine, private_val_share, run_job
from dpgen.cli.summary import print_summary
from dpgen.distributed import leave_process_group, process_rank
from dpgen.files import atomic_write_text
from dpgen.memory import peak_rss_gb
from dpgen.privacy.ledger import conversion_for


def build_datamodule(cfg: DictConfig):
    return instantiate(cfg.data, batch_size=cfg.method.batch_size, n_teachers=cfg.method.n_teachers,
                       seed=cfg.seed, allow_data_dependent_preprocessing=not cfg.method.private,
                       private_val=private_val_share(cfg), data_hash=data_hash(cfg))


def build_method(cfg: DictConfig, dm):
    return instantiate(cfg.method.module, shape=dm.shape, num_classes=dm.num_classes, kind=dm.kind,
                       _convert_="all")


def build_callbacks(cfg: DictConfig, out: Path, release: Callable[[pl.LightningModule], None] | None = None
                    ) -> list[pl.Callback]:
    """The run's callbacks in hook order: the budget first, then what writes the released step (samples, the
    generator when training ends: `release`), the teachers' memory given back, then the evaluations."""
    callbacks = [
        pl.callbacks.RichProgressBar(),
        pl.callbacks.ModelCheckpoint(dirpath=out / "checkpoints", save_last=True, save_top_k=0,
                                     every_n_train_steps=cfg.checkpoint_every_n_steps),
    ]
    if cfg.method.private:  # first: what the callbacks below write of a step, the budget has accepted
        p = cfg.privacy
        callbacks.append(PrivacyBudget(epsilon=p.epsilon, delta=p.delta, bound=p.bound, conversion=p.conversion,
                                       allow_large_delta=p.allow_large_delta))
    callbacks += [
        SampleGrid(str(out), every_n_steps=cfg.samples.every_n_steps, per_class=cfg.samples.per_class,
                   seed=cfg.seed),
        ProgressLog(every_seconds=cfg.progress_log_every_seconds),
        RandomState(),
        RunClock(),
        FreeHeap(),
    ]
    if release is not None:
        callbacks.append(Release(release))
    callbacks.append(FreePrivateModules())  # before the evaluations, which sample the generator only
    for cb in (cfg.eval.get("callbacks") or {}).values():
        if cb is not None:  # an entry set to null is off (an experiment file's '~eval.callbacks.<name>')
            callbacks.append(instantiate(cb))
    return callbacks


def build_logger(cfg: DictConfig):
    """The configured logger, without the `epoch` Lightning adds to every row: epochs against steps would tell
    the number of training records (an epoch is one pass over them), which no mechanism releases."""
    if not (cfg.logger and "_target_" in cfg.logger):
        return False
    logger = instantiate(cfg.logger)
    log_metrics = logger.log_metrics
    logger.log_metrics = lambda metrics, step=None: log_metrics(
        {key: value for key, value in metrics.items() if key != "epoch"}, step)
    return logger


def save_generator(model, dm, cfg: DictConfig, path: Path) -> None:
    """The released generator (a pickled module on the CPU) with how to sample it; read by generate.py."""
    release = model.release()
    release["generator"] = copy.deepcopy(release["generator"]).cpu()
    release.update(method=OmegaConf.to_container(cfg.method, resolve=True), data_name=dm.name,
                   class_names=list(dm.class_names), feature_names=getattr(dm, "feature_names", None))
    atomic_save(release, path)


def privacy_report(model, cfg: DictConfig) -> dict:
    if model.ledger is None:  # a reproduced reference code that claims an epsilon says what it claims, and why not
        return {"private": False, "note": "non-private method: no differential privacy guarantee",
                **getattr(model, "privacy_claim", {})}
    p, ledger = cfg.privacy, model.ledger
    conversions = {b: conversion_for(p.conversion, ledger.has_pld(b)) for b in ledger.bounds}  # as the planner does
    eps = {b: ledger.epsilon(p.delta, bound=b, conversion=c)[0] for b, c in conversions.items()}
    return {"private": True, "delta": p.delta, "governing_bound": ledger.resolve_bound(p.bound),
            "conversion": p.conversion, "conversions": conversions, "epsilon": eps, "stop": ledger.stop}


# Lightning warnings that every dpgen run would print and that need no action: a "training epoch" here is one pass
# over the teachers' partitions (a few batches); checkpoints hold the state after a step, which is what resume=
# continues from; and a deprecation inside Lightning itself.
KNOWN_WARNINGS = (r"The number of training batches \(\d+\) is smaller than the logging interval",
                  r"Using ModelCheckpoint with manual optimization and every_n_train_steps",
                  r"`isinstance\(treespec, LeafSpec\)` is deprecated")


def quiet_known_warnings() -> None:
    for message in KNOWN_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def run(cfg: DictConfig, extra_callbacks: tuple[pl.Callback, ...] = ()) -> dict:
    out = Path(cfg.output_dir)
    quiet_known_warnings()
    pl.seed_everything(cfg.seed, workers=True)
    dm = build_datamodule(cfg)
    dm.prepare_data()
    dm.setup("fit")  # bad data fails here, before any training
    model = build_method(cfg, dm)
    if process_rank()[1] > 1 and not model.process_split:
        # every process would train on the same data with its own noise: the noise averages out under DDP
        fail(f"method={cfg.method.name} runs in one process; only G-PATE splits its teachers over torchrun's processes")
    model.log_private = bool(cfg.log_private_losses)
    if getattr(model, "privacy_claim", None):  # privacy.json flags it from the start: a crash leaves no run unflagged
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / "privacy.json", json.dumps(privacy_report(model, cfg), indent=2) + "\n")
    callbacks = build_callbacks(cfg, out, lambda m: save_generator(m, dm, cfg, out / "generator.pt"))
    callbacks += list(extra_callbacks)
    trainer = pl.Trainer(**instantiate(cfg.trainer, _convert_="all"), callbacks=callbacks, logger=build_logger(cfg),
                         default_root_dir=str(out), plugins=[AtomicCheckpointIO()])
    start = time.time()
    trainer.fit(model, datamodule=dm, ckpt_path=cfg.resume)
    wall = time.time() - start
    leave_process_group()  # trainer=ddp: the processes need each other no more
    if not trainer.is_global_zero:  # trainer=ddp: process 0 writes the run's files
        return {}
    results = {
        "method": cfg.method.name, "data": cfg.data.name, "command": command_line("train.py"),
        "machine": machine(cfg.trainer.get("accelerator", "cpu"), trainer.world_size),
        "steps": model.released_step(trainer.global_step),
        "steps_run": trainer.global_step, "wall_time_s": round(wall, 1), "peak_rss_gb": round(peak_rss_gb(), 2),
        "losses": {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("loss")},
        "privacy": privacy_report(model, cfg),
    }
    for cb in callbacks:
        if getattr(cb, "results", None):
            results[cb.name] = cb.results
    atomic_write_text(out / "metrics.json", json.dumps(results, indent=2, default=float) + "\n")
    grid = next((cb.last_path for cb in callbacks if isinstance(cb, SampleGrid)), None)
    print_summary(out, results, grid, private=bool(cfg.method.private))
    return results


@hydra.main(config_path=str(CONF_DIR), config_name="config", version_base="1.3")
def hydra_main(cfg: DictConfig) -> None:
    run_job(run, cfg)


def main() -> None:
    """Entry point: a configuration mistake is one error line (exit 2); then Hydra runs the job."""
    check_config("config")
    hydra_main()


if __name__ == "__main__":
    main()
