"""The one reader of saved demo results: what it accepts, and errors that name the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from geryon.demo.result_file import DemoResultError, check_result, load_result


def test_a_demo_result_is_returned_as_read(tmp_path: Path) -> None:
    doc = {"format": "geryon.demo", "runs": [{"mode": "geryon"}], "config": {"workers": 2}}
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(doc))
    assert load_result(path) == doc
    assert check_result(doc) == doc


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "cannot read a demo result"),
        ("[1, 2]", "expected a geryon demo result (an object), got list"),
        ('{"format": "geryon.profile", "runs": []}', "format: expected 'geryon.demo'"),
        ('{"format": "geryon.demo"}', "runs: expected a list of runs, got NoneType"),
        ('{"format": "geryon.demo", "runs": {}}', "runs: expected a list of runs, got dict"),
    ],
)
def test_a_file_that_is_not_a_demo_result_is_refused_naming_file_and_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "demo.json"
    path.write_text(text)
    with pytest.raises(DemoResultError) as e:
        load_result(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


def test_a_missing_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(DemoResultError, match="cannot read a demo result"):
        load_result(tmp_path / "nowhere.json")


def test_inside_a_larger_document_the_errors_say_where() -> None:
    with pytest.raises(DemoResultError, match=r"^\[2\]: expected a geryon demo result"):
        check_result(5, "[2]")
    with pytest.raises(DemoResultError, match=r"^\[2\]\.format: expected"):
        check_result({"format": "x"}, "[2]")
