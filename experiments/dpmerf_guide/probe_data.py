"""The probes' data: a data set's datamodule as train.py builds it (src/dpgen/conf), set up for fitting."""
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.utils import instantiate


def datamodule(data: str, private_val: bool = False):
    """`data`'s datamodule; with `private_val`, the private validation split held out as eval.selection=private_val
    holds it out (so the training records are those a guided run's guide reads)."""
    overrides = [f"data={data}"] + (["eval.selection=private_val"] if private_val else [])
    with initialize_config_dir(str(Path("src/dpgen/conf").resolve()), version_base=None):
        cfg = compose("config", overrides)
    share = cfg.eval.private_val.fraction if private_val else 0.0
    dm = instantiate(cfg.data, batch_size=256, seed=0, private_val=share)
    dm.setup("fit")
    return dm
