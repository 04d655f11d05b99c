"""Tables: any CSV with a label column (`csv`) and the Kaggle credit-card fraud data (`kaggle_credit`).

Scaling of features (a parameter computed from private data is either public configuration or paid for with
privacy budget):
- `public` (default): per-feature ranges [low, high] given in the config; values are clipped to the range
  and mapped linearly to [0, 1]. Nothing is computed from the data.
- `fit`: min/max of the training split, mapped to [0, 1] (test values clipped). Not private: allowed only
  when the datamodule is built with `allow_data_dependent_preprocessing=True` (non-private methods).
- `none`: raw values.
- `auto` (the `csv` config's default): `public` when ranges are configured, else `fit`.
Likewise `classes: null` reads the label values from the file, for non-private methods only.

Categorical columns (`categorical: {column: [values...]}`, the values public configuration like `classes`) are
one-hot encoded and not scaled. Layout of a record: the continuous features in order, then one one-hot block per
categorical column in the order of `categorical` (`feature_names` gives "column=value" for those columns).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.data.errors import DataConfigError, DataFormatError
from dpgen.data.sources import find_first
from dpgen.data.split import stratified_split

SCALINGS = ("public", "fit", "none", "auto")
MISSING = {"", "nan", "na", "n/a", "null", "none"}


def line_of(row: int) -> str:
    return f"line {row + 2}"  # row 0 is the line after the header


def check_columns(frame: pd.DataFrame, wanted: list[str], path: Path) -> None:
    missing = [c for c in wanted if c not in frame.columns]
    if missing:
        raise DataFormatError(f"{path}: column(s) {missing} not found; the file has columns {list(frame.columns)}")


def numeric_matrix(frame: pd.DataFrame, columns: list[str], path: Path) -> np.ndarray:
    """The columns as float64, or an error naming the first non-numeric, missing or infinite value."""
    out = np.empty((len(frame), len(columns)))
    for j, name in enumerate(columns):
        raw = frame[name]
        values = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        bad = np.flatnonzero(~np.isfinite(values))
        if len(bad):
            row, text = int(bad[0]), str(raw.iloc[bad[0]])
            what = "a missing value (NaN)" if pd.isna(raw.iloc[bad[0]]) or text.strip().lower() in MISSING else (
                f"an infinite value {text!r}" if np.isinf(values[row]) else f"a non-numeric value {text!r}")
            raise DataFormatError(f"{path}: column {name!r} has {what} at {line_of(row)} "
                                  f"({len(bad)} bad value(s) in that column); clean or drop these rows")
        out[:, j] = values
    return out


def label_text(column: pd.Series) -> pd.Series:
    if pd.api.types.is_float_dtype(column) and column.notna().all() and (column == column.round()).all():
        column = column.astype("int64")  # 1.0 -> "1"
    return column.astype(str).str.strip()


def observed_classes(column: pd.Series) -> list[str]:
    """The distinct label values, sorted (numerically for numbers)."""
    column = column.dropna()
    values = sorted(column.unique()) if pd.api.types.is_numeric_dtype(column) else sorted(label_text(column).unique())
    return label_text(pd.Series(values, dtype=column.dtype)).tolist()


def encode_labels(column: pd.Series, classes: list[str], path: Path, what: str = "label column",
                  allowed: str = "the configured classes") -> np.ndarray:
    """Class index of each row; `classes` are the label values as written in the file, in class order."""
    text = label_text(column)
    index = {value: i for i, value in enumerate(classes)}
    codes = text.map(index)
    bad = np.flatnonzero(codes.isna().to_numpy())
    if len(bad):
        raise DataFormatError(f"{path}: {what} {column.name!r} has value {text.iloc[bad[0]]!r} at "
                              f"{line_of(int(bad[0]))}, not one of {allowed} {classes}")
    return codes.to_numpy(dtype=np.int64, copy=True)


def one_hot_columns(frame: pd.DataFrame, categorical: dict[str, list[str]], path: Path) -> np.ndarray:
    """One one-hot block per categorical column, in the order of `categorical`; a value that is missing or not
    among the column's configured values is an error naming the column and the line."""
    blocks = []
    for name, values in categorical.items():
        missing = np.flatnonzero(frame[name].isna().to_numpy())
        if len(missing):
            raise DataFormatError(f"{path}: categorical column {name!r} has a missing value at "
                                  f"{line_of(int(missing[0]))}; clean or drop these rows, or list a value for it")
        codes = encode_labels(frame[name], values, path, "categorical column", "its configured values")
        blocks.append(np.eye(len(values))[codes])
    return np.concatenate(blocks, 1) if blocks else np.empty((len(frame), 0))


def scale(values: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    return (np.clip(values, low, high) - low) / (high - low)


class CSVDataModule(DPGenDataModule):
    """A user's CSV: `label` names the label column, `classes` lists its values in class order.

    `features`: the feature columns (default: every other column, read from the header at construction).
    `categorical`: {column: its values in order} for feature columns to one-hot encode (module doc).
    `test_path`: a separate test CSV; otherwise a stratified `test_fraction` split fixed by `split_seed`.
    `path` / `test_path`: absolute, or relative to the working directory, or to `root`.
    """

    kind = "table"

    def __init__(self, path: str, label: str, classes: list | None = None, class_names: list[str] | None = None,
                 features: list[str] | None = None, categorical: dict[str, list] | None = None,
                 test_path: str | None = None, test_fraction: float = 0.2, split_seed: int = 0,
                 scaling: str = "public", default_range: list[float] | None = None,
                 ranges: dict[str, list[float]] | None = None, name: str = "csv", **common):
        super().__init__(**common)
        self.name, self.path, self.label, self.test_path = name, path, label, test_path
        self.classes = [str(c) for c in (classes if classes is not None else self.file_classes())]
        self.class_names = [str(c) for c in (class_names or self.classes)]
        if len(self.class_names) != len(self.classes) or len(set(self.classes)) != len(self.classes):
            raise DataConfigError(f"{name}: classes {self.classes} must be distinct and match class_names "
                                  f"{self.class_names} one to one")
        self.num_classes = len(self.classes)
        self.test_fraction, self.split_seed = float(test_fraction), int(split_seed)
        columns = list(features) if features is not None else self.header_features()
        self.features = columns
        self.categorical = self.categorical_values(categorical or {}, columns)
        self.continuous = [c for c in columns if c not in self.categorical]
        self.feature_names = self.continuous + [f"{c}={v}" for c, values in self.categorical.items() for v in values]
        self.shape = (len(self.feature_names),)
        configured = default_range is not None or bool(ranges) or not self.continuous
        self.scaling = ("public" if configured else "fit") if scaling == "auto" else scaling
        self.low, self.high = self.public_ranges(default_range, ranges or {})

    def csv_file(self, path: str) -> Path:
        given = Path(path).expanduser()
        candidates = [given] if given.is_absolute() else [Path.cwd() / given, self.root / given]
        return find_first(self.name, given.name, candidates,
                          f"set data.path to your CSV file (absolute, or relative to data.root={self.root})")

    def file_classes(self) -> list[str]:
        if not self.allow_data_dependent_preprocessing:
            raise DataConfigError(f"{self.name}: set data.classes (the label values, in class order); reading them "
                                  f"from the data is allowed only for non-private methods (the label set of private data is itself private)")
        path = self.csv_file(self.path)
        if self.label not in pd.read_csv(path, nrows=0).columns:
            raise DataFormatError(f"{path}: label column {self.label!r} not found")
        return observed_classes(pd.read_csv(path, usecols=[self.label])[self.label])

    def header_features(self) -> list[str]:
        path = self.csv_file(self.path)
        columns = list(pd.read_csv(path, nrows=0).columns)
        if self.label not in columns:
            raise DataFormatError(f"{path}: label column {self.label!r} not found; the file has columns {columns}")
        return [c for c in columns if c != self.label]

    def categorical_values(self, categorical: dict, columns: list[str]) -> dict[str, list[str]]:
        """{column: its values as text}, checked: feature columns only, each with >= 2 distinct values."""
        out = {str(c): [str(v) for v in values] for c, values in categorical.items()}
        unknown = [c for c in out if c not in columns]
        if unknown:
            raise DataConfigError(f"{self.name}: categorical column(s) {unknown} are not among the features "
                                  f"{columns}")
        few = [c for c, values in out.items() if len(set(values)) != len(values) or len(values) < 2]
        if few:
            raise DataConfigError(f"{self.name}: categorical column(s) {few} need a list of at least 2 distinct "
                                  f"values (data.categorical={{column: [value, ...]}})")
        return out

    def public_ranges(self, default_range, ranges) -> tuple[np.ndarray | None, np.ndarray | None]:
        """[low, high] per feature for `scaling: public`; checks the other modes are allowed."""
        if self.scaling not in SCALINGS:
            raise DataConfigError(f"{self.name}: scaling must be one of {SCALINGS}, got {self.scaling!r}")
        if self.scaling == "fit" and not self.allow_data_dependent_preprocessing:
            raise DataConfigError(
                f"{self.name}: scaling=fit computes min/max from the private training data, which no privacy mechanism pays for, and "
                f"is allowed only for non-private methods; give public per-feature ranges instead "
                f"(data.default_range=[low,high] and/or data.ranges={{column: [low,high]}})")
        if self.scaling != "public":
            return None, None
        unknown = sorted(set(ranges) - set(self.continuous))
        missing = [f for f in self.continuous if f not in ranges and default_range is None]
        if unknown or missing:
            raise DataConfigError(f"{self.name}: scaling=public needs a range for every continuous feature: no "
                                  f"range for {missing}, ranges given for unknown or categorical columns {unknown} "
                                  f"(set data.ranges or data.default_range)")
        bounds = np.array([ranges.get(f, default_range) for f in self.continuous], dtype=float).reshape(-1, 2)
        if bounds.shape != (len(self.continuous), 2) or not (bounds[:, 0] < bounds[:, 1]).all():
            raise DataConfigError(f"{self.name}: each range must be [low, high] with low < high")
        return bounds[:, 0], bounds[:, 1]

    def read(self, path: Path) -> tuple[np.ndarray, np.ndarray]:
        return self.read_frame(pd.read_csv(path, low_memory=False), path)

    def read_frame(self, frame: pd.DataFrame, path: Path | str) -> tuple[np.ndarray, np.ndarray]:
        """Unscaled records (continuous columns, then the one-hot blocks) and class indices of a table in the
        file's layout; `path` names it in errors."""
        if frame.empty:
            raise DataFormatError(f"{path}: no data rows")
        check_columns(frame, [self.label, *self.continuous, *self.categorical], path)
        if frame[self.label].isna().any():
            row = int(np.flatnonzero(frame[self.label].isna().to_numpy())[0])
            raise DataFormatError(f"{path}: label column {self.label!r} has a missing value at {line_of(row)}")
        x = np.concatenate([numeric_matrix(frame, self.continuous, path),
                            one_hot_columns(frame, self.categorical, path)], 1)
        return x, encode_labels(frame[self.label], self.classes, path)

    def load(self) -> tuple[TensorData, TensorData]:
        x, y = self.read(self.csv_file(self.path))
        if self.test_path is not None:
            train_x, train_y = x, y
            test_x, test_y = self.read(self.csv_file(self.test_path))
        else:
            train_idx, test_idx = stratified_split(torch.from_numpy(y), self.test_fraction, self.split_seed)
            train_x, train_y, test_x, test_y = x[train_idx], y[train_idx], x[test_idx], y[test_idx]
        if self.scaling == "fit":  # non-private only (checked in __init__)
            continuous = train_x[:, :len(self.continuous)]
            self.low, self.high = continuous.min(0), continuous.max(0)
            self.high = np.where(self.high > self.low, self.high, self.low + 1)  # constant column -> 0
        return self.tensor_data(train_x, train_y), self.tensor_data(test_x, test_y)

    def tensor_data(self, x: np.ndarray, y: np.ndarray) -> TensorData:
        if self.low is not None:
            n = len(self.continuous)
            x = np.concatenate([scale(x[:, :n], self.low, self.high), x[:, n:]], 1)
        records = torch.from_numpy(x).float()
        self.check_float32(records)
        return TensorData(records, torch.from_numpy(y))

    def check_float32(self, records: torch.Tensor) -> None:
        """An error naming the first column whose value is finite in float64 but not in float32 (|v| > 3.4e38, e.g.
        1e39 with scaling=none): such a value would reach the methods as inf and break their sensitivity."""
        bad = ~torch.isfinite(records)
        if bad.any():
            row, col = (int(i) for i in torch.nonzero(bad)[0])
            raise DataFormatError(f"{self.name}: column {self.feature_names[col]!r} has a value beyond float32's "
                                  f"range (|v| > 3.4e38) in record {row} of the split; rescale that column or give "
                                  "it a public range (data.ranges)")

    def records(self, frame: pd.DataFrame, source: Path | str) -> TensorData:
        """A table in the file's layout (e.g. a synthetic CSV from generate.py, or the real training file) as the
        records the methods and evaluations see: encoded and scaled as this datamodule's own splits."""
        if self.scaling == "fit" and self.low is None:
            raise DataConfigError(f"{self.name}: scaling=fit knows its ranges only after setup()")
        return self.tensor_data(*self.read_frame(frame, source))

    def schema(self) -> dict:
        """What maps records back to the file's columns (`decode`), as plain values: the label column and its
        classes, the feature columns in order, which are continuous and with which ranges, the categorical
        columns' values. Public configuration only, but for scaling=fit (non-private methods), whose ranges are
        the training split's and known after setup()."""
        if self.scaling == "fit" and self.low is None:
            raise DataConfigError(f"{self.name}: scaling=fit knows its ranges only after setup()")
        return {"label": self.label, "classes": list(self.classes), "features": list(self.features),
                "continuous": list(self.continuous), "categorical": {k: list(v) for k, v in self.categorical.items()},
                "low": None if self.low is None else [float(v) for v in self.low],
                "high": None if self.high is None else [float(v) for v in self.high]}

    def to_frame(self, x: torch.Tensor, y: torch.Tensor) -> pd.DataFrame:
        """Records (e.g. generated ones) as a table with the file's column names and values (`decode`)."""
        return decode(x, y, self.schema())

    def to_original(self, x: torch.Tensor) -> torch.Tensor:
        """Scaled records (e.g. generated ones) back to the units of the file (one-hot blocks as they are)."""
        if self.low is None:
            return x
        n = len(self.continuous)
        low, high = (torch.as_tensor(v, dtype=x.dtype, device=x.device) for v in (self.low, self.high))
        return torch.cat([low + x[:, :n] * (high - low), x[:, n:]], 1)


def decode(x, y, schema: dict) -> pd.DataFrame:
    """Records in the datamodules' layout (continuous columns scaled to [0, 1], then one one-hot block per
    categorical column) and class indices -> a table with the original column names and values: the features in
    the configured order, then the label column. Continuous columns are mapped back to their units (as
    `CSVDataModule.to_original`); each categorical column takes the value of its block's largest entry (generated
    blocks are exactly one-hot); labels are the configured classes as written in the file."""
    x = x.detach().cpu().double().numpy() if isinstance(x, torch.Tensor) else np.asarray(x, dtype=float)
    y = y.detach().cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    continuous, categorical = schema["continuous"], schema["categorical"]
    width = len(continuous) + sum(len(v) for v in categorical.values())
    if x.ndim != 2 or x.shape[1] != width:
        raise ValueError(f"records of shape {tuple(x.shape)} do not match the table's {width} encoded columns")
    values = x[:, :len(continuous)]
    if schema.get("low") is not None:
        low, high = np.asarray(schema["low"]), np.asarray(schema["high"])
        values = low + values * (high - low)
    columns = {name: values[:, j] for j, name in enumerate(continuous)}
    start = len(continuous)
    for name, levels in categorical.items():
        block = x[:, start:start + len(levels)]
        columns[name] = np.asarray(levels, dtype=object)[block.argmax(1)]
        start += len(levels)
    frame = pd.DataFrame({name: columns[name] for name in schema["features"]})
    frame[schema["label"]] = np.asarray(schema["classes"], dtype=object)[y.astype(np.int64)]
    return frame


CREDIT_FEATURES = [f"V{i}" for i in range(1, 29)] + ["Amount"]


class KaggleCreditDataModule(CSVDataModule):
    """Kaggle credit-card fraud (Dal Pozzolo et al. 2015, as in PATE-GAN Sec. 5 and G-PATE Sec. 6.1):
    `creditcard.csv` from `root`; the 29 features V1..V28 and Amount (Time is dropped), label Class
    (0 normal, 1 fraud); stratified train/test split (`test_fraction`, `split_seed`)."""

    def __init__(self, name: str = "kaggle_credit", test_fraction: float = 0.2, split_seed: int = 0,
                 scaling: str = "public", default_range: list[float] | None = None,
                 ranges: dict[str, list[float]] | None = None, **common):
        super().__init__(path="creditcard.csv", label="Class", classes=[0, 1], class_names=["normal", "fraud"],
                         features=CREDIT_FEATURES, test_fraction=test_fraction, split_seed=split_seed,
                         scaling=scaling, default_range=default_range, ranges=ranges, name=name, **common)

    def csv_file(self, path: str) -> Path:
        return find_first(
            self.name, path, [self.root / path, self.root / "kaggle_credit" / path],
            "download it from https://www.kaggle.com/datasets/mlg-ulb/creditcardfraud (Kaggle account needed: "
            "`kaggle datasets download -d mlg-ulb/creditcardfraud`), unzip and put creditcard.csv into "
            f"{self.root}/ (or set data.root / $DPGEN_DATA)")
