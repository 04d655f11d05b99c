"""Errors for bad or missing input data: each message says what is wrong, where, and what to do."""
from __future__ import annotations

from pathlib import Path


class DataError(Exception):
    """Base class: a problem with the user's data or data configuration (reported without a traceback)."""


class DataNotFoundError(DataError, FileNotFoundError):
    """A required file is in none of the places searched."""

    def __init__(self, dataset: str, filename: str, looked_in: list[str], how_to_get: str):
        self.dataset, self.filename, self.looked_in, self.how_to_get = dataset, filename, list(looked_in), how_to_get
        places = "\n".join(f"  - {place}" for place in self.looked_in)
        self.message = f"{dataset}: cannot find {filename}.\nLooked in:\n{places}\nHow to get it: {how_to_get}"
        super().__init__(self.message)

    def __str__(self) -> str:  # OSError would format its constructor arguments as errno / strerror
        return self.message


class ChecksumError(DataError):
    """A file with a published hash does not match it (corrupt or different download)."""

    def __init__(self, path: Path, algorithm: str, expected: str, actual: str, hint: str = ""):
        self.path, self.algorithm, self.expected, self.actual = Path(path), algorithm, expected, actual
        super().__init__(f"{path}: {algorithm} is {actual}, expected {expected}. The file is corrupt or not the "
                         f"official one: delete it and fetch it again{hint}.")


class DataFormatError(DataError, ValueError):
    """A file is found but its content is not usable (missing column, non-numeric value, NaN, image size...)."""


class DataConfigError(DataError, ValueError):
    """The data configuration is inconsistent (e.g. a data-dependent preprocessing for a private method)."""
