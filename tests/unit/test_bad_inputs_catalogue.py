"""docs/bad-inputs.md stays tied to tests: every test a row names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CATALOGUE = ROOT / "docs" / "bad-inputs.md"
#: rows whose message is read from the code, with no test yet: this number may only go down
READ_FROM_CODE_AT_MOST = 16


def _rows() -> list[tuple[str, str]]:
    rows = []
    for line in CATALOGUE.read_text().splitlines():
        m = re.match(r"^\| (\d+[a-z]?) \|.*\| ([^|]+) \|$", line)
        if m:
            rows.append((m.group(1), m.group(2).strip()))
    return rows


def _refs(cell: str) -> list[str]:
    return re.findall(r"\b([ue]):(test_\w+)(?:::(\w+))?", cell)


def test_every_row_names_an_existing_test_or_says_it_has_none():
    rows = _rows()
    assert len(rows) >= 60
    missing, untested = [], []
    for num, cell in rows:
        refs = _refs(cell)
        if not refs:
            assert cell == "read from code", f"row {num}: test column {cell!r} names no test"
            untested.append(num)
            continue
        for kind, module, name in refs:
            path = ROOT / "tests" / ("unit" if kind == "u" else "e2e") / f"{module}.py"
            if not path.is_file():
                missing.append(f"row {num}: {path.relative_to(ROOT)} does not exist")
            elif name and not re.search(rf"^\s*def {name}\(", path.read_text(), re.M):
                missing.append(f"row {num}: {path.relative_to(ROOT)} has no test {name}")
    assert not missing, "\n".join(missing)
    assert len(untested) <= READ_FROM_CODE_AT_MOST, f"rows without a test: {untested}"


def test_the_checker_fails_on_a_row_naming_a_missing_test(tmp_path, monkeypatch):
    import tests.unit.test_bad_inputs_catalogue as me

    bad = tmp_path / "bad-inputs.md"
    bad.write_text(CATALOGUE.read_text() + "\n| 99 | x | y | u:test_api::test_that_does_not_exist |\n")
    monkeypatch.setattr(me, "CATALOGUE", bad)
    try:
        me.test_every_row_names_an_existing_test_or_says_it_has_none()
    except AssertionError as e:
        assert "row 99: tests/unit/test_api.py has no test test_that_does_not_exist" in str(e)
    else:
        raise AssertionError("the catalogue check passed a row naming a missing test")
