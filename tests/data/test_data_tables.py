import numpy as np
import pandas as pd
import pytest
import torch

from dpgen.data.errors import DataConfigError, DataFormatError, DataNotFoundError
from dpgen.data.tables import CSVDataModule, KaggleCreditDataModule, decode

CREDIT_RANGES = {"default_range": [-10.0, 10.0], "ranges": {"Amount": [0.0, 5000.0]}}  # as conf/data


def test_credit_features_labels_and_stratified_split(credit_root):
    dm = KaggleCreditDataModule(root=str(credit_root), **CREDIT_RANGES)
    assert (dm.kind, dm.shape, dm.num_classes, dm.class_names) == ("table", (29,), 2, ["normal", "fraud"])
    assert dm.feature_names[0] == "V1" and dm.feature_names[-1] == "Amount" and "Time" not in dm.feature_names
    dm.setup()
    # 50 rows, fraud when r % 5 == 0 -> 10 fraud, 40 normal; 20% of each class to test: 2 + 8
    assert (len(dm.train_data), len(dm.test_data)) == (40, 10)
    assert dm.train_data.y.sum() == 8 and dm.test_data.y.sum() == 2
    assert dm.train_data.x.shape == (40, 29) and dm.train_data.x.dtype == torch.float32


def test_credit_public_scaling_hand_computed(credit_root):
    dm = KaggleCreditDataModule(root=str(credit_root), **CREDIT_RANGES)
    dm.setup()
    x = torch.cat([dm.train_data.x, dm.test_data.x]).double()
    rows = (x[:, 28] * 50).round().long()  # Amount = 100 r in [0, 5000] -> r / 50
    assert torch.equal(rows.sort().values, torch.arange(50))
    # V1 = (r - 25) / 2, clipped to [-10, 10], then (v + 10) / 20: r = 0 -> -12.5 -> 0; r = 30 -> 2.5 -> 0.625
    v1 = (((rows.double() - 25) / 2).clamp(-10, 10) + 10) / 20
    assert torch.allclose(x[:, 0], v1, atol=1e-6)
    assert torch.allclose(x[rows == 30, 0], torch.tensor([0.625], dtype=torch.double))
    assert torch.allclose(x[rows == 0, 0], torch.tensor([0.0], dtype=torch.double))
    assert torch.allclose(x[:, 1], torch.tensor((0.2 + 10) / 20, dtype=torch.double))  # V2 = 0.2 -> 0.51
    back = dm.to_original(dm.train_data.x)
    assert torch.allclose(back[:, 28], dm.train_data.x[:, 28] * 5000)  # Amount back in euros


def test_split_is_fixed_by_split_seed_not_run_seed(credit_root):
    a, b = (KaggleCreditDataModule(root=str(credit_root), seed=s, **CREDIT_RANGES) for s in (0, 1))
    c = KaggleCreditDataModule(root=str(credit_root), split_seed=1, **CREDIT_RANGES)
    for dm in (a, b, c):
        dm.setup()
    assert torch.equal(a.test_data.x, b.test_data.x) and not torch.equal(a.test_data.x, c.test_data.x)


def test_missing_creditcard_csv_names_places_and_how_to_get(tmp_path):
    dm = KaggleCreditDataModule(root=str(tmp_path), **CREDIT_RANGES)
    with pytest.raises(DataNotFoundError) as info:
        dm.setup()
    message = str(info.value)
    assert "creditcard.csv" in message and str(tmp_path / "kaggle_credit" / "creditcard.csv") in message
    assert "kaggle.com/datasets/mlg-ulb/creditcardfraud" in message


def write(tmp_path, text, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


TABLE = "a,b,target\n0,10,yes\n5,20,no\n10,30,yes\n"


def test_csv_fit_scaling_uses_training_min_max(tmp_path):
    test = write(tmp_path, "a,b,target\n20,15,no\n-5,30,yes\n", "test.csv")
    dm = CSVDataModule(path=write(tmp_path, TABLE), test_path=test, label="target", classes=["no", "yes"],
                       scaling="fit", allow_data_dependent_preprocessing=True)
    assert dm.feature_names == ["a", "b"] and dm.shape == (2,)
    dm.setup()
    # a: train min 0, max 10 -> 0, 0.5, 1; b: min 10, max 30 -> 0, 0.5, 1; labels yes=1, no=0
    assert torch.equal(dm.train_data.x, torch.tensor([[0.0, 0.0], [0.5, 0.5], [1.0, 1.0]]))
    assert torch.equal(dm.train_data.y, torch.tensor([1, 0, 1]))
    # test values outside the training range are clipped: a 20 -> 1, -5 -> 0; b 15 -> 0.25
    assert torch.equal(dm.test_data.x, torch.tensor([[1.0, 0.25], [0.0, 1.0]]))


def test_csv_fit_scaling_refused_for_private_methods(tmp_path):
    with pytest.raises(DataConfigError, match="private training data, which no privacy mechanism pays for"):
        CSVDataModule(path=write(tmp_path, TABLE), label="target", classes=["no", "yes"], scaling="fit")


def test_csv_public_scaling_needs_a_range_for_every_feature(tmp_path):
    with pytest.raises(DataConfigError, match=r"no range for \['b'\]"):
        CSVDataModule(path=write(tmp_path, TABLE), label="target", classes=["no", "yes"], ranges={"a": [0, 1]})


def test_csv_missing_label_column(tmp_path):
    with pytest.raises(DataFormatError, match="label column 'label' not found.*'a', 'b', 'target'"):
        CSVDataModule(path=write(tmp_path, TABLE), label="label", classes=[0, 1], default_range=[0, 1])


def test_csv_missing_feature_column(tmp_path):
    dm = CSVDataModule(path=write(tmp_path, TABLE), label="target", classes=["no", "yes"], features=["a", "c"],
                       default_range=[0, 1])
    with pytest.raises(DataFormatError, match=r"column\(s\) \['c'\] not found"):
        dm.setup()


def test_csv_non_numeric_value_names_column_and_line(tmp_path):
    dm = CSVDataModule(path=write(tmp_path, "a,b,target\n1,2,0\n3,abc,1\n"), label="target", classes=[0, 1],
                       default_range=[0, 5])
    with pytest.raises(DataFormatError, match="column 'b' has a non-numeric value 'abc' at line 3"):
        dm.setup()


def test_csv_nan_names_column_and_line(tmp_path):
    dm = CSVDataModule(path=write(tmp_path, "a,b,target\n1,2,0\n3,4,1\n,5,0\n"), label="target", classes=[0, 1],
                       default_range=[0, 5])
    with pytest.raises(DataFormatError, match="column 'a' has a missing value \\(NaN\\) at line 4"):
        dm.setup()


def test_csv_value_beyond_float32_is_refused_not_passed_on_as_inf(tmp_path):
    # 1e39 is finite in float64 (the parse) but inf in float32 (the records): caught after the cast
    dm = CSVDataModule(path=write(tmp_path, "a,b,target\n1,2,0\n3,1e39,1\n1,2,0\n3,4,1\n"), label="target",
                       classes=[0, 1], scaling="none", test_fraction=0.5)
    with pytest.raises(DataFormatError, match="column 'b' has a value beyond float32's range"):
        dm.setup()


def test_csv_unknown_label_value(tmp_path):
    dm = CSVDataModule(path=write(tmp_path, TABLE), label="target", classes=["no", "maybe"], default_range=[0, 50])
    with pytest.raises(DataFormatError, match="value 'yes' at line 2, not one of the configured classes"):
        dm.setup()


def test_csv_float_labels_match_integer_classes(tmp_path):
    dm = CSVDataModule(path=write(tmp_path, "a,target\n1,1.0\n2,0.0\n3,1.0\n4,0.0\n5,1.0\n"), label="target",
                       classes=[0, 1], default_range=[0, 10], test_fraction=0.4)
    dm.setup()
    # 2 zeros and 3 ones; test gets round(0.8) = 1 zero and round(1.2) = 1 one
    assert sorted(dm.test_data.y.tolist()) == [0, 1] and len(dm.train_data) == 3


def test_csv_defaults_read_classes_and_fit_ranges_for_non_private_methods(tmp_path):
    path = write(tmp_path, "a,y\n" + "".join(f"{v},{lab}\n" for v, lab in [(0, 10), (4, 2), (8, 10), (2, 2)]))
    dm = CSVDataModule(path=path, label="y", scaling="auto", allow_data_dependent_preprocessing=True,
                       test_fraction=0.5)
    assert dm.classes == ["2", "10"] and dm.scaling == "fit"  # sorted as numbers, not as text
    dm.setup()
    # train: one record of each class, min/max over the train split only; 2 -> class 0, 10 -> class 1
    assert sorted(dm.train_data.x.flatten().tolist()) == [0.0, 1.0]


def test_csv_defaults_refused_for_private_methods(tmp_path):
    path = write(tmp_path, TABLE)
    with pytest.raises(DataConfigError, match="set data.classes"):
        CSVDataModule(path=path, label="target", scaling="auto")
    with pytest.raises(DataConfigError, match="data.default_range"):
        CSVDataModule(path=path, label="target", classes=["no", "yes"], scaling="auto")
    assert CSVDataModule(path=path, label="target", classes=["no", "yes"], scaling="auto",
                         default_range=[0, 30]).scaling == "public"


MIXED = "a,colour,b,size,target\n0,red,10,1,yes\n5,blue,20,2,no\n10,red,30,1.0,yes\n"  # size 1.0 matches "1"


def mixed(tmp_path, **kw):
    args = {"path": write(tmp_path, MIXED), "label": "target", "classes": ["no", "yes"], "default_range": [0, 10],
            "ranges": {"b": [10, 30]}, "categorical": {"colour": ["red", "green", "blue"], "size": [1, 2]}}
    return CSVDataModule(**(args | kw))


def test_csv_categorical_columns_are_one_hot_blocks_after_the_scaled_continuous_ones(tmp_path):
    dm = mixed(tmp_path, test_path=write(tmp_path, MIXED, "test.csv"))
    assert dm.continuous == ["a", "b"] and dm.shape == (7,)
    assert dm.feature_names == ["a", "b", "colour=red", "colour=green", "colour=blue", "size=1", "size=2"]
    dm.setup()
    assert torch.equal(dm.train_data.x, torch.tensor([[0.0, 0.0, 1, 0, 0, 1, 0], [0.5, 0.5, 0, 0, 1, 0, 1],
                                                      [1.0, 1.0, 1, 0, 0, 1, 0]]))
    back = dm.to_original(dm.train_data.x)  # continuous columns in the file's units, one-hot blocks as they are
    assert torch.equal(back[:, :2], torch.tensor([[0.0, 10], [5, 20], [10, 30]]))
    assert torch.equal(back[:, 2:], dm.train_data.x[:, 2:])


def test_csv_categorical_fit_scaling_scales_only_the_continuous_columns(tmp_path):
    dm = mixed(tmp_path, scaling="fit", default_range=None, ranges=None, allow_data_dependent_preprocessing=True,
               test_path=write(tmp_path, MIXED, "test.csv"))
    dm.setup()
    assert dm.low.tolist() == [0, 10] and dm.train_data.x[1].tolist() == [0.5, 0.5, 0, 0, 1, 0, 1]


@pytest.mark.parametrize("text, words", [
    ("a,colour,b,size,target\n0,pink,10,1,yes\n",
     r"categorical column 'colour' has value 'pink' at line 2, not one of its configured values \['red', 'green'"),
    ("a,colour,b,size,target\n0,red,10,1,yes\n0,,10,1,no\n", "categorical column 'colour' has a missing value at line 3"),
])
def test_csv_bad_categorical_values_name_column_and_line(tmp_path, text, words):
    dm = mixed(tmp_path, path=write(tmp_path, text), test_path=write(tmp_path, text, "test.csv"))
    with pytest.raises(DataFormatError, match=words):
        dm.setup()


@pytest.mark.parametrize("kw, words", [
    ({"categorical": {"shade": ["a", "b"]}}, r"categorical column\(s\) \['shade'\] are not among the features"),
    ({"categorical": {"colour": ["red"], "size": [1, 2]}}, r"\['colour'\] need a list of at least 2 distinct"),
    ({"categorical": {"colour": ["red", "red"], "size": [1, 2]}}, r"\['colour'\] need a list of at least 2"),
    ({"ranges": {"colour": [0, 1]}}, r"ranges given for unknown or categorical columns \['colour'\]"),
])
def test_csv_bad_categorical_config(tmp_path, kw, words):
    with pytest.raises(DataConfigError, match=words):
        mixed(tmp_path, **kw)


def test_csv_with_only_categorical_features_needs_no_ranges(tmp_path):
    dm = CSVDataModule(path=write(tmp_path, "c,target\nx,0\ny,1\nx,1\ny,0\n"), label="target", classes=[0, 1],
                       categorical={"c": ["x", "y"]}, scaling="auto", test_fraction=0.5)
    assert dm.scaling == "public" and dm.shape == (2,)
    dm.setup()
    assert torch.equal(dm.train_data.x.sum(1), torch.ones(2))


LISTED = "age,colour,y,size\n" + "".join(
    f"{20 + r},{['red', 'green', 'blue'][r % 3]},{['no', 'yes'][r % 2]},{r * 0.5}\n" for r in range(20))


def mixed_module(tmp_path, **kwargs) -> CSVDataModule:
    (tmp_path / "m.csv").write_text(LISTED)
    return CSVDataModule(path=str(tmp_path / "m.csv"), label="y", classes=["no", "yes"],
                         categorical={"colour": ["red", "green", "blue"]}, ranges={"age": [0, 100], "size": [0, 20]},
                         root=str(tmp_path), **kwargs)


def test_records_decode_to_the_files_columns_and_back(tmp_path):
    """to_frame: the file's column names, units, categories and labels (features in order, then the label);
    records: the same table encoded again as the datamodule's own split."""
    dm = mixed_module(tmp_path)
    dm.setup()
    frame = dm.to_frame(dm.train_data.x, dm.train_data.y)
    assert list(frame.columns) == ["age", "colour", "size", "y"]
    original = pd.read_csv(tmp_path / "m.csv")
    rounded = frame.assign(age=frame.age.round().astype(int))
    merged = rounded.merge(original, on=["age", "colour", "y"], suffixes=("", "_file"))
    assert len(merged) == len(frame) == 16 and set(frame.colour) == {"red", "green", "blue"}
    assert np.allclose(merged["size"], merged["size_file"], atol=1e-5) and set(frame.y) == {"no", "yes"}
    again = dm.records(frame, "frame")
    assert torch.allclose(again.x, dm.train_data.x, atol=1e-6) and torch.equal(again.y, dm.train_data.y)
    # generated records: categories by the largest entry of each block, continuous back to units
    x = torch.tensor([[0.5, 0.8, 0.1, 0.7, 0.2]])  # age, size, then the colour block
    row = decode(x, torch.tensor([1]), dm.schema()).iloc[0]
    assert (row.colour, row.y) == ("green", "yes") and np.allclose([row.age, row["size"]], [50.0, 16.0])


def test_schema_of_fit_scaling_needs_the_data(tmp_path):
    dm = mixed_module(tmp_path, scaling="fit", allow_data_dependent_preprocessing=True)
    with pytest.raises(DataConfigError, match="after setup"):
        dm.schema()
    dm.setup()
    assert dm.schema()["low"][0] == dm.low[0]
