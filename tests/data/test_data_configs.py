"""Every conf/data/*.yaml builds its datamodule the way the app does (instantiate + batch_size, n_teachers,
seed, allow_data_dependent_preprocessing) and the built module loads the generated fixtures."""
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.utils import instantiate
from omegaconf import OmegaConf

from dpgen.cli.common import CONF_DIR
from dpgen.data import DPGenDataModule
from dpgen.data.errors import DataNotFoundError

CONF = Path(__file__).resolve().parents[2] / "conf" / "data"
ALIASES = {"celeba": "celeba_gender_s"}  # config -> the config it selects
APP_KWARGS = {"batch_size": 4, "n_teachers": 2, "seed": 0, "allow_data_dependent_preprocessing": False}


def build(name: str, **overrides) -> DPGenDataModule:
    cfg = OmegaConf.merge(OmegaConf.load(CONF / f"{name}.yaml"), overrides)
    return instantiate(cfg, **APP_KWARGS)


def test_every_config_has_target_and_name():
    names = sorted(p.stem for p in CONF.glob("*.yaml"))
    assert names == ["celeba", "celeba_gender_l", "celeba_gender_s", "celeba_hair", "csv", "doctor_contacts",
                     "fashion_mnist", "hi", "image_folder", "kaggle_credit", "mnist"]
    for name in set(names) - set(ALIASES):
        cfg = OmegaConf.load(CONF / f"{name}.yaml")
        assert cfg._target_.startswith("dpgen.data.") and cfg.name == name
    for name, setting in ALIASES.items():  # the setting itself, through the defaults list: no copy to drift
        assert OmegaConf.to_container(OmegaConf.load(CONF / f"{name}.yaml")) == {"defaults": [setting, "_self_"]}


def composed(*overrides: str):
    """The data config as train.py composes it."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides)).data


def test_celeba_is_the_gender_s_setting_of_the_paper(celeba_root):
    # G-PATE section 6.1's CelebA-Gender(S): 32x32x3, female / male
    cfg = composed("data=celeba")
    assert cfg == composed("data=celeba_gender_s")
    dm = instantiate(cfg, root=str(celeba_root), check_hashes=False, download=False, **APP_KWARGS)
    dm.setup()
    assert (dm.name, dm.shape, dm.class_names, len(dm.train_data)) == ("celeba_gender_s", (3, 32, 32),
                                                                       ["female", "male"], 6)
    assert composed("data=celeba", "data.image_size=64").image_size == 64  # still a config like any other


def test_celeba_without_its_files_names_them(tmp_path):
    dm = instantiate(composed("data=celeba"), root=str(tmp_path), download=False, **APP_KWARGS)
    with pytest.raises(DataNotFoundError, match="cannot find list_eval_partition.txt") as info:
        dm.setup()
    message = str(info.value)
    assert "list_attr_celeba.txt" in message and str(tmp_path / "celeba" / "list_eval_partition.txt") in message


@pytest.mark.parametrize("name", ["mnist", "fashion_mnist"])
def test_digit_configs_build_without_loading(name, tmp_path):
    dm = build(name, root=str(tmp_path))
    assert (dm.name, dm.kind, dm.shape, dm.num_classes, dm.n_teachers) == (name, "image", (1, 28, 28), 10, 2)


@pytest.mark.parametrize("name, shape, classes", [("celeba_gender_s", (3, 32, 32), 2),
                                                  ("celeba_gender_l", (3, 64, 64), 2),
                                                  ("celeba_hair", (3, 64, 64), 3)])
def test_celeba_configs_load_fixture(name, shape, classes, celeba_root):
    dm = build(name, root=str(celeba_root), check_hashes=False, download=False)
    dm.setup()
    x, y = next(iter(dm.train_dataloader()))
    # 2 teachers, batch 4 (drawn again where a partition is smaller): hair has 4 training images, gender 6
    assert (dm.shape, dm.num_classes, x.shape, y.shape) == (shape, classes, (2, 4, *shape), (2, 4))
    assert sum(len(p) for p in dm.partitions) == (4 if name == "celeba_hair" else 6)


def test_kaggle_credit_config_loads_fixture(credit_root):
    dm = build("kaggle_credit", root=str(credit_root))
    dm.setup()
    x, _ = next(iter(dm.train_dataloader()))
    assert x.shape == (2, 4, 29) and 0 <= x.min() and x.max() <= 1


def test_csv_and_image_folder_configs(tmp_path, write_images):
    (tmp_path / "t.csv").write_text("a,y\n1,0\n2,1\n3,0\n4,1\n5,0\n6,1\n")
    dm = build("csv", root=str(tmp_path), path="t.csv", label="y", classes=[0, 1], default_range=[0, 10])
    dm.setup()
    assert dm.shape == (1,) and len(dm.train_data) + len(dm.test_data) == 6
    write_images(tmp_path / "imgs", {"a": [(32, 32)] * 2, "b": [(32, 32)] * 2})
    dm = build("image_folder", root=str(tmp_path), path="imgs", test_fraction=0.5)
    dm.setup()
    assert dm.shape == (3, 32, 32) and len(dm.train_data) == 2
