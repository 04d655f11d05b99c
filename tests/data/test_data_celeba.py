import numpy as np
import pytest
import torch

from dpgen.data.celeba import CelebADataModule
from dpgen.data.errors import ChecksumError, DataFormatError, DataNotFoundError


def celeba(root, **kwargs):
    kwargs = {"image_size": 32, "check_hashes": False, "download": False, **kwargs}
    dm = CelebADataModule(root=str(root), **kwargs)
    dm.setup()
    return dm


def test_attributes_known_before_loading(tmp_path):
    dm = CelebADataModule(root=str(tmp_path), task="hair", image_size=64)  # nothing on disk: no error yet
    assert (dm.kind, dm.shape, dm.num_classes, dm.class_names) == ("image", (3, 64, 64), 3,
                                                                   ["black", "blonde", "brown"])


def test_gender_official_partition_and_labels(celeba_root, face_color):
    dm = celeba(celeba_root, task="gender")
    # fixture: images 1-6 partition 0 (Male 1,-1,1,-1,1,-1), 7 partition 1 (dropped), 8-10 partition 2
    assert torch.equal(dm.train_data.y, torch.tensor([1, 0, 1, 0, 1, 0]))
    assert torch.equal(dm.test_data.y, torch.tensor([0, 1, 0]))
    assert dm.train_data.x.shape == (6, 3, 32, 32) and dm.train_data.stored.dtype == torch.uint8
    # the 178x178 center crop removes the 20 white rows at top and bottom: every pixel is the face colour
    # (up to JPEG error), image k of the file list -> colour (20 + 20k, 230 - 20k, 100)
    for data, files in ((dm.train_data, range(6)), (dm.test_data, range(7, 10))):
        expected = torch.tensor([face_color(k) for k in files], dtype=torch.float)[:, :, None, None] / 255
        assert (data.x - expected).abs().max() < 6 / 255


def test_validation_images_join_training_when_asked(celeba_root):
    dm = celeba(celeba_root, task="gender", include_valid_in_train=True)
    assert torch.equal(dm.train_data.y, torch.tensor([1, 0, 1, 0, 1, 0, 1]))  # image 7 (Male) added


def test_hair_keeps_images_with_exactly_one_colour(celeba_root):
    dm = celeba(celeba_root, task="hair", image_size=64)
    # train: 1 black, 2 blond, 3 brown, 4 black+blond (out), 5 none (out), 6 brown -> [0, 1, 2, 2]
    assert torch.equal(dm.train_data.y, torch.tensor([0, 1, 2, 2]))
    assert torch.equal(dm.test_data.y, torch.tensor([1, 2]))  # 8 blond, 9 brown, 10 black+brown (out)
    assert dm.train_data.x.shape == (4, 3, 64, 64)


def test_no_crop_keeps_the_white_bands(celeba_root):
    dm = celeba(celeba_root, crop=None)
    top_row = dm.train_data.x[:, :, 0]  # 218 rows -> 32: the top output row lies in the white band
    assert top_row.min() > 0.9


def test_resize_is_done_once_and_cached(celeba_root, monkeypatch):
    celeba(celeba_root)
    cache = celeba_root / "celeba" / "dpgen_cache" / "img_align_celeba_32_crop178.npy"
    assert np.load(cache, mmap_mode="r").shape == (10, 3, 32, 32)
    monkeypatch.setattr("dpgen.data.celeba.open_image", lambda *a: pytest.fail("image decoded again"))
    assert len(celeba(celeba_root).train_data) == 6  # served from the cache


def test_published_hashes_are_checked(celeba_root):
    with pytest.raises(ChecksumError, match="list_attr_celeba.txt.*75e246fa.*data.check_hashes=false"):
        celeba(celeba_root, check_hashes=True)


def test_missing_celeba_names_file_places_and_how_to_get(tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        celeba(tmp_path)
    message = str(info.value)
    assert "list_eval_partition.txt" in message and str(tmp_path / "celeba") in message
    assert "mmlab.ie.cuhk.edu.hk" in message


def test_missing_image_is_named(celeba_root):
    (celeba_root / "celeba" / "img_align_celeba" / "000004.jpg").unlink()
    with pytest.raises(DataNotFoundError, match="000004.jpg"):
        celeba(celeba_root)


def test_image_smaller_than_crop_is_an_error(celeba_root):
    from PIL import Image

    Image.new("RGB", (100, 120)).save(celeba_root / "celeba" / "img_align_celeba" / "000002.jpg")
    with pytest.raises(DataFormatError, match="000002.jpg is 100x120, smaller than the 178x178 crop"):
        celeba(celeba_root)


def test_bad_attribute_value_is_an_error(celeba_root):
    path = celeba_root / "celeba" / "list_attr_celeba.txt"
    lines = path.read_text().splitlines()
    fields = lines[3].split()  # image 000002.jpg
    fields[1 + lines[1].split().index("Black_Hair")] = "0"
    lines[3] = " ".join(fields)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataFormatError, match="line 4"):
        celeba(celeba_root, task="hair")
