"""A percentage written on a line that names a kept run must be a number of that run's metrics.json: the answer
pages, docs/LOG.md included, restate no number from memory. docs/RUNS.md (generated) is not an answer page."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
NOT_ANSWER_PAGES = {"RUNS.md"}
PERCENT = re.compile(r"(?<![\w.])(\d{1,3}(?:\.\d+)?)\s?%")


def numbers(value) -> list[float]:
    """Every number in a metrics.json, nested dictionaries and lists included (an epoch's accuracy too)."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def agrees(written: str, values: list[float]) -> bool:
    """`written` (a percentage as printed) is one of `values` (fractions or percentages) to its printed digits."""
    digits = len(written.split(".")[1]) if "." in written else 0
    tolerance = 0.5 * 10**-digits + 1e-9
    return any(abs(100 * v - float(written)) <= tolerance or abs(v - float(written)) <= tolerance for v in values)


def test_every_percentage_beside_a_run_name_is_that_runs_number():
    runs = {p.name: numbers(json.loads((p / "metrics.json").read_text()))
            for p in RESULTS.iterdir() if (p / "metrics.json").is_file()}
    name = re.compile(r"\b(" + "|".join(sorted(map(re.escape, runs), key=len, reverse=True)) + r")\b")
    pages = [ROOT / "README.md", *(p for p in (ROOT / "docs").rglob("*.md")
                                   if p.name not in NOT_ANSWER_PAGES and RESULTS not in p.parents)]
    wrong = []
    for page in pages:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            named = set(name.findall(line))
            for match in PERCENT.finditer(line) if named else ():
                if not agrees(match.group(1), [v for run in named for v in runs[run]]):
                    wrong.append(f"{page.relative_to(ROOT)}:{number}: {match.group(0)} beside {sorted(named)}")
    assert not wrong, "percentages that are not their runs' numbers:\n" + "\n".join(wrong)


def test_a_percentage_agrees_only_to_its_printed_digits():
    assert agrees("94.6", [0.9457]) and agrees("95", [0.9457]) and agrees("0.9457", [0.9457])
    assert not agrees("94.5", [0.9457]) and not agrees("94.60", [0.9457])
