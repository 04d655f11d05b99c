"""pytest fixtures of the data tests; the writers themselves are in fixtures.py."""
from __future__ import annotations

from pathlib import Path

import pytest

from fixtures import celeba_color, idx_file, image_folder, write_celeba, write_credit


@pytest.fixture
def celeba_root(tmp_path) -> Path:
    write_celeba(tmp_path)
    return tmp_path


@pytest.fixture
def credit_root(tmp_path) -> Path:
    write_credit(tmp_path)
    return tmp_path


@pytest.fixture
def write_idx():
    return idx_file


@pytest.fixture
def write_images():
    return image_folder


@pytest.fixture
def face_color():
    return celeba_color
