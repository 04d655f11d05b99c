"""privacy/ imports nothing of the project and neither torch nor lightning (the bottom layer of the package)."""

import ast
from pathlib import Path

import dpgen.privacy

FORBIDDEN = ("torch", "lightning", "pytorch_lightning")


def test_privacy_imports_only_itself_and_numeric_libraries():
    for path in Path(dpgen.privacy.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else []
            else:
                continue
            for name in names:
                assert not name.startswith("dpgen"), f"{path.name} imports {name}"
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
