"""`SampleGrid`: pictures of what the generator makes, one column per class, every N steps and at the end."""
from __future__ import annotations

from pathlib import Path

import torch
from torchvision.utils import make_grid, save_image

from dpgen.callbacks.release import WritesAtTrainEnd


class SampleGrid(WritesAtTrainEnd):
    """Writes `samples/step_XXXXXXX.png` (images) or `.csv` (tables) into `out_dir`, and `final.*` at the end.

    The same latent codes are used every time, so grids over training are comparable.
    """

    def __init__(self, out_dir: str, every_n_steps: int = 200, per_class: int = 10, seed: int = 0):
        self.out_dir = Path(out_dir) / "samples"
        self.every_n_steps, self.per_class, self.seed = every_n_steps, per_class, seed
        self.last_path: Path | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if self.every_n_steps and step % self.every_n_steps == 0 and trainer.is_global_zero:
            self.write(trainer, pl_module, f"step_{step:07d}")

    def write_final(self, trainer, pl_module):  # before the evaluation callbacks
        self.write(trainer, pl_module, "final")

    def write(self, trainer, pl_module, stem: str) -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        c = pl_module.num_classes
        labels = torch.arange(c).repeat(self.per_class)  # row r, column = class
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            x, y = pl_module.sample(len(labels), labels)
        if pl_module.kind == "image":
            path = self.out_dir / f"{stem}.png"
            save_image(x, path, nrow=c, padding=2, pad_value=1.0)
            self.log_image(trainer, path, x, c)
        else:
            path = self.out_dir / f"{stem}.csv"
            names = getattr(trainer.datamodule, "feature_names", None) or [f"x{i}" for i in range(x.shape[1])]
            rows = [",".join(names + ["label"])]
            rows += [",".join(f"{v:.6g}" for v in row.tolist()) + f",{int(lab)}" for row, lab in zip(x, y)]
            path.write_text("\n".join(rows) + "\n")
        self.last_path = path
        return path

    @staticmethod
    def log_image(trainer, path: Path, x: torch.Tensor, ncol: int) -> None:
        for logger in trainer.loggers:
            if hasattr(logger, "log_image"):  # W&B
                logger.log_image(key="samples", images=[make_grid(x, nrow=ncol)], step=trainer.global_step,
                                 caption=[path.name])
