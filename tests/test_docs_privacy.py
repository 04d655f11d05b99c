"""docs/PRIVACY.md answers on one screen: at most 25,000 bytes, opening with one table that names every field a
privacy.json holds and every privacy column of the results tables; the derivations live on docs/methods/*.md,
and every link and `docs/...md` reference into them resolves (file and #anchor, GitHub's heading slugs)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

from dpgen.privacy.ledger import PrivacyLedger
from dpgen.privacy.rdp import DEFAULT_ORDERS
from dpgen.privacy.selection import charge, selection_report

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PRIVACY = DOCS / "PRIVACY.md"
METHOD_PAGES = sorted((DOCS / "methods").glob("*.md"))
MAX_BYTES = 25_000
# Kept runs whose privacy.json files the table must cover: one per kind of method (a data-dependent PATE bound, one
# GDP release, a method without a guarantee, GS-WGAN's two bounds, PATE-TripleGAN's GDP votes with DP-SGD)
RUNS = ("gpate_mnist_eps10_private_val", "dpmerf_mnist_eps1_conv_private_val", "pategan_2018_code_mnist_eps1",
        "gswgan_mnist_eps10_per_sample_nd500", "pate_triplegan_mnist_eps10_b1024")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
DOC_REFERENCE = re.compile(r"(?<![\w./-])(docs/[\w./-]*?\.md)(?:#([\w-]+))?")
FENCE = re.compile(r"^(```|~~~)")


def first_table(text: str) -> str:
    """The first markdown table of `text` (its consecutive lines starting with "|")."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
    return "\n".join(lines[start:end])


def names(table: str, key: str) -> bool:
    """`key` appears in the table as code: `key`, `key.sub...` or `key[...]`."""
    return re.search(r"`" + re.escape(key) + r"[`.\[]", table) is not None


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped (letters, digits, _, - and spaces kept),
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of every heading of a markdown file, duplicates numbered as GitHub numbers them."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    """The relative link targets of a markdown file (outside fenced code)."""
    text = "\n".join(line for line, fenced in _unfenced(path) if not fenced)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def _unfenced(path: Path):
    fenced = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            fenced = not fenced
            yield line, True
        else:
            yield line, fenced


def check_target(source: Path, target: str) -> str | None:
    """Why the link `target` of `source` does not resolve, or None."""
    file, _, anchor = target.partition("#")
    path = (source.parent / file).resolve() if file else source
    if not path.exists():
        return f"{source.relative_to(REPO)}: {target}: no such file"
    if anchor and path.suffix == ".md" and anchor not in anchors(path):
        return f"{source.relative_to(REPO)}: {target}: no heading #{anchor} in {path.relative_to(REPO)}"
    return None


def test_privacy_page_fits_one_screen_budget():
    size = len(PRIVACY.read_bytes())
    assert size <= MAX_BYTES, f"docs/PRIVACY.md is {size} bytes, over {MAX_BYTES}: move derivations to docs/methods/"


@pytest.mark.parametrize("run", RUNS)
def test_first_table_names_every_field_of_a_kept_privacy_json(run):
    table = first_table(PRIVACY.read_text())
    privacy = json.loads((DOCS / "results" / run / "privacy.json").read_text())
    missing = [key for key in privacy if not names(table, key)]
    assert not missing, f"docs/PRIVACY.md's first table does not name {missing} of docs/results/{run}/privacy.json"


def test_first_table_names_every_field_the_code_writes():
    """What ledger.report_json, the budget callback and the private validation selection write, beyond what the
    kept runs happen to hold (an alias, a central-limit GDP release, a data-dependent bound beside a selection)."""
    table = first_table(PRIVACY.read_text())
    ledger = PrivacyLedger(aliases={"data_dependent": "data_independent"})
    ledger.record("gaussian", {"data_independent": np.full(len(DEFAULT_ORDERS), 1e-3)})
    ledger.record_gdp("clt", 0.01, asymptotic=True)
    report = json.loads(ledger.report_json(1e-5, "data_dependent"))
    source = (REPO / "src/dpgen/callbacks/privacy_budget.py").read_text()
    extra = set(re.findall(r'budget\["(\w+)"\]', source)) | set(re.findall(r'budget = \{"(\w+)"', source))
    assert {"caveats", "records", "neighbouring", "budget"} <= extra, "privacy_budget.write_final changed: update me"
    split = {"data": "mnist", "fraction": 0.0167, "seed": 0, "config_sha256": "0" * 64}
    generator = {"governing_bound": "data_dependent", "epsilon": 5.0, "delta": 1e-5, "conversion": "classical",
                 "total": {"data_independent": {"classical": {"epsilon": 8.0, "order": 4.0}}}}
    selection = selection_report([charge(1.0, True, split, "train.py", [], None)], generator)
    fields = [*report, *extra, *(f"records.private_val.{k}" for k in split),
              *(f"downstream_selection.{k}" for k in selection),
              *(f"downstream_selection.release.{k}" for k in selection["release"]),
              *(f"stop.{k}" for k in ("reason", "discarded_steps"))]
    missing = [f for f in fields if not named_field(table, f)]
    assert not missing, f"docs/PRIVACY.md's first table does not name {missing}"
    assert "allow_large_delta" in table, "the caveat of privacy.allow_large_delta"


def named_field(table: str, field: str) -> bool:
    """A top-level key as `names` finds it; a nested one `top.sub.leaf` where a row that names `top` names the leaf
    as code (`leaf`, `sub.leaf` or `top.sub.leaf`)."""
    top, *rest = field.split(".")
    if not rest:
        return names(table, top)
    leaf = re.compile(r"`(?:[\w\[\]]+\.)*" + re.escape(rest[-1]) + r"[`.\[]")
    return any(names(row, top) and leaf.search(row) for row in table.splitlines())


def test_first_table_names_every_privacy_column_of_the_results_tables():
    table = first_table(PRIVACY.read_text())
    bounds = set()
    for metrics in (DOCS / "results").glob("*/metrics.json"):
        bounds |= set((json.loads(metrics.read_text()).get("privacy") or {}).get("epsilon") or {})
    assert {"data_dependent", "data_independent", "sound", "as_published"} <= bounds
    report = ast.parse((REPO / "src/dpgen/cli/report.py").read_text())
    accuracies = next(ast.literal_eval(node.value) for node in report.body if isinstance(node, ast.Assign)
                      and any(getattr(t, "id", None) == "ACCURACIES" for t in node.targets))
    columns = [f"eps ({b})" for b in sorted(bounds)] + list(accuracies.values()) + ["guarantee", "budget eps"]
    missing = [c for c in columns if c not in table]
    assert not missing, f"docs/PRIVACY.md's first table does not explain the results columns {missing}"


def test_links_of_the_privacy_and_method_pages_resolve():
    assert METHOD_PAGES, "docs/methods/ holds no page"
    broken = [why for page in (PRIVACY, *METHOD_PAGES) for target in links(page)
              if (why := check_target(page, target))]
    assert not broken, "\n".join(broken)


def test_links_into_the_privacy_and_method_pages_resolve():
    """Every page's links to docs/PRIVACY.md or docs/methods/ (file and #anchor)."""
    ours = {PRIVACY.resolve(), *(p.resolve() for p in METHOD_PAGES)}
    broken = []
    for page in [REPO / "README.md", *sorted(DOCS.glob("*.md"))]:
        for target in links(page):
            file = target.partition("#")[0]
            if file and (page.parent / file).resolve() in ours and (why := check_target(page, target)):
                broken.append(why)
    assert not broken, "\n".join(broken)


def test_docs_references_in_docs_resolve():
    """Every `docs/...md` a page under docs/ names exists (and its #anchor, where one is given)."""
    broken = []
    for page in sorted(DOCS.rglob("*.md")):
        for file, anchor in DOC_REFERENCE.findall(page.read_text()):
            path = REPO / file
            if not path.is_file():
                broken.append(f"{page.relative_to(REPO)}: {file}: no such file")
            elif anchor and anchor not in anchors(path):
                broken.append(f"{page.relative_to(REPO)}: {file}#{anchor}: no such heading")
    assert not broken, "\n".join(broken)


def test_commands_of_the_privacy_and_method_pages_name_existing_configs():
    """Every `experiment=` and `method=` the pages name is a file under conf/."""
    missing = []
    for page in (PRIVACY, *METHOD_PAGES):
        for group, name in re.findall(r"(?<![\w.])(experiment|method)=([\w/.-]*\w)", page.read_text()):
            if not (REPO / "conf" / group / f"{name}.yaml").is_file():
                missing.append(f"{page.relative_to(REPO)}: {group}={name}")
    assert not missing, "\n".join(missing)


# The method pages' options tables and the configuration files they describe
OPTIONS = {"gpate": ("gpate",), "pategan": ("pategan", "pategan_2018_code"), "dpgan": ("dpgan", "dpcgan"),
           "gswgan": ("gswgan",), "pate_triplegan": ("pate_triplegan",), "dpmerf": ("dpmerf",)}
NOT_OPTIONS = {"name", "private", "n_teachers", "_target_"}  # what every method file has, or is not an option


@pytest.mark.parametrize("page", sorted(OPTIONS))
def test_method_page_opens_with_an_options_table_of_its_configuration(page):
    import yaml

    text = (DOCS / "methods" / f"{page}.md").read_text()
    head = text.split("\n## Privacy", 1)[0]
    assert "| option | default | what it does | privacy effect |" in head, f"docs/methods/{page}.md: no options table"
    assert not re.search(r"20\d\d-\d\d-\d\d", head), f"docs/methods/{page}.md: a date before its Privacy section"
    table = "\n".join(line for line in head.splitlines() if line.startswith("|"))
    missing = []
    for conf in OPTIONS[page]:
        config = yaml.safe_load((REPO / "conf" / "method" / f"{conf}.yaml").read_text())
        keys = [(k, v) for k, v in config.items() if k != "module"] + list(config.get("module", {}).items())
        for key, value in keys:
            interpolated = isinstance(value, str) and value.startswith("${")  # set elsewhere (privacy.*, seed)
            if key in NOT_OPTIONS or interpolated:
                continue
            if not re.search(r"`(?:module\.)?" + re.escape(key) + r"[`.]", table):
                missing.append(f"{conf}: {key}")
    assert not missing, f"docs/methods/{page}.md's options table does not name {missing}"
