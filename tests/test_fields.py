"""The strict YAML loader shared by the agent config and the fabric intent: each refusal names the
line and column, and the limits hold before anything large is built."""

from __future__ import annotations

from pathlib import Path

import pytest

from geryon.fields import MAX_YAML_BYTES, MAX_YAML_DEPTH, load_yaml


class Bad(ValueError):
    pass


def load(tmp_path: Path, text: str | bytes) -> object:
    p = tmp_path / "c.yaml"
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text)
    return load_yaml(p, Bad, "config")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: 1\nb: 2\na: 3\n", r"line 3, column 1: duplicate key 'a' \(first at line 1, column 1\)"),
        ("x:\n  - {k: 1, k: 2}\n", r"line 2, column 12: duplicate key 'k'"),
        ("dscp: 046\n", r"line 1, column 7: '046' is read by YAML 1\.1 as a non-decimal number"),
        ("port: 1:20\n", r"line 1, column 7: '1:20' .*sexagesimal"),
        ("v: 0x1f\n", r"line 1, column 4: '0x1f' .*hex"),
        ("v: 0b101\n", r"line 1, column 4: '0b101' .*binary"),
        ("v: 1_000\n", r"line 1, column 4: '1_000'"),
        ("v: 1:20.5\n", r"line 1, column 4: '1:20\.5' is a YAML 1\.1 sexagesimal"),
        ("a: &x [1, 2]\nb: *x\n", r"line 1, column 4: anchors and aliases"),
        ("<<: {a: 1}\n", r"line 1, column 1: merge keys"),
        (
            "a: " + "[" * (MAX_YAML_DEPTH + 1) + "]" * (MAX_YAML_DEPTH + 1) + "\n",
            r"line 1, column 35: nested deeper than 32",
        ),
    ],
)
def test_refused_constructs_name_line_and_column(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(Bad, match=r"c\.yaml: refused YAML \(" + message):
        load(tmp_path, text)


def test_what_stays_allowed(tmp_path: Path) -> None:
    assert load(tmp_path, "a: 0\nb: -3\nc: +7\nd: 1.5\ne: '046'\nf: off\n") == {
        "a": 0, "b": -3, "c": 7, "d": 1.5, "e": "046", "f": False,
    }  # fmt: skip
    nested = "a: " + "[" * (MAX_YAML_DEPTH - 1) + "]" * (MAX_YAML_DEPTH - 1) + "\n"  # + the mapping = 32
    assert load(tmp_path, nested) is not None


def test_size_and_encoding_limits(tmp_path: Path) -> None:
    with pytest.raises(Bad, match="over 1024 KiB"):
        load(tmp_path, "a: 1\n" + "#" * MAX_YAML_BYTES)
    with pytest.raises(Bad, match="not UTF-8"):
        load(tmp_path, b"a: \xff\n")
    with pytest.raises(Bad, match=r"malformed YAML \(line 2, column 1\)"):
        load(tmp_path, "a: [1\n")
