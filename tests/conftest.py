"""Shared test set-up."""
import pytest
import torch

# Small tensors: one thread avoids OpenMP spin-waiting when the two cores are shared (measured 10x+ faster).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def reproducible_privacy_noise(monkeypatch, request):
    """Privacy noise is seeded from the OS's entropy (aggregation/noise.py); tests fix it to be repeatable.
    Tests marked `secret_noise` see the real behaviour."""
    if "secret_noise" not in request.keywords:
        monkeypatch.setattr("dpgen.aggregation.noise.secrets.randbits", lambda bits: 12345)


@pytest.fixture(autouse=True)
def grouped_by_xdist(request):
    """Under `--dist loadgroup` (make test) pytest-xdist suffixes the node id of each test of an `xdist_group` with the
    group, so that one worker runs the group and makes its shared runs once. Where the installed pytest ignores that
    (9.2, pytest-dev/pytest-xdist#1386) the tests would still pass, each worker making the runs again: fail instead."""
    if (getattr(request.config.option, "loadgroup", False)  # set by pytest-xdist in its workers
            and request.node.get_closest_marker("xdist_group") and "@" not in request.node.nodeid):
        pytest.fail(f"--dist loadgroup did not group this test (pytest {pytest.__version__}, "
                    "pytest-dev/pytest-xdist#1386): `make install` installs the pytest the test extras pin")
