"""`pip install .` (not only an editable install) ships the Hydra configs and the entry points."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


@pytest.mark.slow
def test_wheel_holds_the_configs_and_an_installed_copy_finds_them(tmp_path):
    # a copy, so that the build's own build/ folder never lands in the working tree
    root = shutil.copytree(Path(__file__).resolve().parents[2], tmp_path / "src", symlinks=True,
                           ignore=shutil.ignore_patterns(".venv", ".git", "outputs", "multirun", "build", "docs"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "wheel"), str(root)], check=True)
    (wheel,) = (tmp_path / "wheel").glob("dpgen-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for conf in ("config.yaml", "method/gpate.yaml", "experiment/gpate/mnist_eps1.yaml",
                 "experiment/unmeasured/gpate/mnist_eps0.2.yaml"):
        assert f"dpgen/conf/{conf}" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "dpgen-train = dpgen.cli.train:main" in text and "dpgen-plan = dpgen.cli.plan:cli" in text
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True)
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]);"
                          "from dpgen.cli.common import CONF_DIR; print(CONF_DIR, (CONF_DIR / 'config.yaml').exists())",
                          str(target)], check=True, capture_output=True, text=True, cwd=tmp_path).stdout.split()
    assert out[0].startswith(str(target)) and out[1] == "True"
