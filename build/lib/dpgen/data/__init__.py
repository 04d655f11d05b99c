"""Datamodules for every dataset dpgen trains on, teacher partitions, and data sources."""
from dpgen.data.base import DPGenDataModule, TensorData
from dpgen.data.celeba import CelebADataModule
from dpgen.data.errors import ChecksumError, DataConfigError, DataError, DataFormatError, DataNotFoundError
from dpgen.data.image_folder import ImageFolderDataModule
from dpgen.data.mnist import FashionMNISTDataModule, MNISTDataModule
from dpgen.data.partition import TeacherBatchSampler, partition_indices
from dpgen.data.tables import CSVDataModule, KaggleCreditDataModule

__all__ = [
    "CSVDataModule", "CelebADataModule", "ChecksumError", "DPGenDataModule", "DataConfigError", "DataError",
    "DataFormatError", "DataNotFoundError", "FashionMNISTDataModule", "ImageFolderDataModule",
    "KaggleCreditDataModule", "MNISTDataModule", "TeacherBatchSampler", "TensorData", "partition_indices",
]
