import pytest
import torch

from dpgen.data.errors import DataFormatError, DataNotFoundError
from dpgen.data.image_folder import ImageFolderDataModule


def test_class_folders_labels_pixels_and_split(tmp_path, write_images):
    write_images(tmp_path / "imgs", {"dog": [(8, 8)] * 4, "cat": [(8, 8)] * 6})
    dm = ImageFolderDataModule(path=str(tmp_path / "imgs"), image_size=8, test_fraction=0.5)
    assert (dm.kind, dm.shape, dm.class_names, dm.num_classes) == ("image", (3, 8, 8), ["cat", "dog"], 2)
    dm.setup()
    # stratified halves: cat 6 -> 3 + 3, dog 4 -> 2 + 2
    assert sorted(dm.train_data.y.tolist()) == [0, 0, 0, 1, 1] and sorted(dm.test_data.y.tolist()) == [0, 0, 0, 1, 1]
    # image k of class c is filled with 10 (10 c + k): every value is a multiple of 10 / 255; dogs >= 100
    values = torch.cat([dm.train_data.x, dm.test_data.x]).amax(dim=(1, 2, 3)) * 255
    labels = torch.cat([dm.train_data.y, dm.test_data.y])
    assert torch.allclose(values, (values / 10).round() * 10, atol=1e-3)
    assert torch.all((values >= 100) == (labels == 1))


def test_train_test_subfolders(tmp_path, write_images):
    write_images(tmp_path / "imgs" / "train", {"a": [(4, 6)] * 3, "b": [(4, 6)] * 2})
    write_images(tmp_path / "imgs" / "test", {"a": [(4, 6)], "b": [(4, 6)]})
    dm = ImageFolderDataModule(path="imgs", root=str(tmp_path), image_size=[4, 6], channels=1)  # relative to root
    dm.setup()
    assert dm.train_data.x.shape == (5, 1, 4, 6) and torch.equal(dm.test_data.y, torch.tensor([0, 1]))


def test_inconsistent_image_sizes_are_an_error(tmp_path, write_images):
    write_images(tmp_path / "imgs", {"a": [(8, 8), (8, 8)], "b": [(8, 8), (9, 8)]})
    dm = ImageFolderDataModule(path=str(tmp_path / "imgs"), image_size=8)
    with pytest.raises(DataFormatError, match=r"b/1.png is 8x9 \(width x height\) but data.image_size is 8x8"):
        dm.setup()


def test_resize_option_accepts_other_sizes(tmp_path, write_images):
    write_images(tmp_path / "imgs", {"a": [(8, 8), (16, 12)], "b": [(9, 8), (8, 8)]})
    dm = ImageFolderDataModule(path=str(tmp_path / "imgs"), image_size=8, resize=True, test_fraction=0.5)
    dm.setup()
    assert dm.train_data.x.shape == (2, 3, 8, 8)
    # a uniform image stays uniform under resizing: a/1.png (value 10) -> 10 / 255 everywhere
    x = torch.cat([dm.train_data.x, dm.test_data.x])
    assert torch.allclose(x.amax(dim=(1, 2, 3)), x.amin(dim=(1, 2, 3)))


def test_missing_folder_and_empty_class(tmp_path, write_images):
    with pytest.raises(DataNotFoundError, match="folder nothing_here"):
        ImageFolderDataModule(path="nothing_here", root=str(tmp_path))
    write_images(tmp_path / "imgs", {"a": [(8, 8)]})
    (tmp_path / "imgs" / "b").mkdir()
    with pytest.raises(DataNotFoundError, match="images of class 'b'"):
        ImageFolderDataModule(path=str(tmp_path / "imgs"), image_size=8).setup()


def test_unreadable_image_is_named(tmp_path, write_images):
    write_images(tmp_path / "imgs", {"a": [(8, 8)] * 2, "b": [(8, 8)] * 2})
    (tmp_path / "imgs" / "b" / "1.png").write_bytes(b"not an image")
    with pytest.raises(DataFormatError, match="b/1.png: cannot read this image"):
        ImageFolderDataModule(path=str(tmp_path / "imgs"), image_size=8).setup()
