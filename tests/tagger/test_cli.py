"""`geryon tag` as a user runs it: a real subprocess, real models, exit codes and messages."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from geryon_cli import geryon

from geryon.tagger.map_table import MapTable


@pytest.fixture(scope="module")
def user_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A user's module with model builders, loaded through module:callable."""
    root = tmp_path_factory.mktemp("user")
    (root / "user_models.py").write_text(
        textwrap.dedent(
            """
            import keras

            def mlp():
                hidden = keras.layers.Dense(16, name="hidden")
                return keras.Sequential([keras.Input((8,)), hidden, keras.layers.Dense(2, name="out")])

            def no_params():
                return keras.Sequential([keras.Input((4,)), keras.layers.ReLU()])

            def broken():
                raise RuntimeError("the user's builder failed")

            NOT_CALLABLE = 3
            """
        )
    )
    return root


def test_json_table_for_a_real_model_with_three_classes(tmp_path: Path) -> None:
    out = tmp_path / "map.json"
    r = geryon("tag", "--model", "alexnet", "--threshold", "0.3", "0.6", "--json", "--map-table", str(out))
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    rows = data["rows"]
    assert [row["order"] for row in rows] == list(range(16))
    assert rows[0]["name"] == "alexnet/conv1/kernel" and rows[0]["class"] == 0
    assert rows[-1]["name"] == "alexnet/fc8/bias" and rows[-1]["class"] == 2
    assert rows[0]["shape"] == [11, 11, 3, 96] and rows[0]["bytes"] == 11 * 11 * 3 * 96 * 4
    assert round(data["summary"]["dense_share"] * 100, 2) == 93.99
    assert sum(data["summary"]["bytes_per_class"]) == data["summary"]["total_bytes"]
    table = MapTable.from_json(out.read_text())
    assert table.num_classes == 3 and table.version == 1
    assert table.classes() == {row["name"]: row["class"] for row in rows}
    assert "importing TensorFlow" in r.stderr  # progress goes to stderr, never into the JSON


def test_text_table_with_partition_plan() -> None:
    r = geryon(
        "tag", "--model", "alexnet", "--urgency", "tic", "--num-ps", "2", "--slice-size", "4MiB", "--quiet"
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("model alexnet: urgency=tic, thresholds=[0.5]")
    assert lines[1].split() == ["#", "name", "shape", "size", "urgency", "class", "kind", "shards"]
    fc6 = next(line for line in lines if "alexnet/fc6/kernel" in line).split()
    assert fc6[2] == "9216x4096" and fc6[-1] == "36"  # 144 MiB in slices of at most 4 MiB
    assert "dense/FC layers: 93.99% of bytes" in r.stdout
    assert "partition plan: 2 PS, slices <= 4.0 MiB" in r.stdout
    assert r.stderr == ""


def test_user_model_from_module_callable(user_models: Path) -> None:
    r = geryon("tag", "--model", "user_models:mlp", "--json", "--quiet", pythonpath=user_models)
    assert r.returncode == 0, r.stderr
    names = [row["name"] for row in json.loads(r.stdout)["rows"]]
    assert names == [
        "sequential/hidden/kernel",
        "sequential/hidden/bias",
        "sequential/out/kernel",
        "sequential/out/bias",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--model", "vgg99"],
            "unknown model 'vgg99'; allowed: alexnet, inceptionv3, mobilenetv2, resnet50, vgg16, vgg19, yolo",
        ),
        (["--model", "vgg16", "--threshold", "1.5"], r"--threshold[0]: 1.5 is not a number in [0, 1]"),
        (["--model", "vgg16", "--threshold", "0.6", "0.4"], "--threshold must be strictly increasing"),
        (["--model", "vgg16", "--threshold", "0.5", "0.5"], "--threshold must be strictly increasing"),
        (["--model", "vgg16", "--classes", "9"], "--classes: 9 classes are not allowed; use 2 to 8"),
        (["--model", "vgg16", "--threshold", *[str(i / 10) for i in range(1, 9)]], "at most 8 classes"),
        (
            ["--model", "vgg16", "--classes", "3", "--threshold", "0.5"],
            "--classes 3 disagrees with 1 --threshold",
        ),
        (["--model", "vgg16", "--input-shape", "224,x"], "--input-shape '224,x': expected positive integers"),
        (["--model", "vgg16", "--num-ps", "0"], "--num-ps 0: expected an integer >= 1"),
        (["--model", "vgg16", "--slice-size", "1MiB"], "--slice-size needs --num-ps"),
        (["--model", "vgg16", "--num-ps", "2", "--slice-size", "lots"], "--slice-size:"),
        (["--model", ":build"], "expected module:callable"),
    ],
)
def test_bad_input_fails_fast_with_one_line_and_exit_2(args: list[str], message: str) -> None:
    r = geryon("tag", *args)
    assert r.returncode == 2
    assert r.stdout == ""
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert "importing TensorFlow" not in r.stderr  # rejected before paying for the import


@pytest.mark.parametrize(
    ("model", "message"),
    [
        ("user_models:no_params", "has no trainable variables"),
        ("user_models:broken", "could not be built: RuntimeError: the user's builder failed"),
        ("user_models:NOT_CALLABLE", "'NOT_CALLABLE' is not callable"),
        ("user_models:missing", "has no attribute 'missing'"),
        ("no_such_module_xyz:build", "cannot import module 'no_such_module_xyz'"),
    ],
)
def test_bad_user_models_exit_2_without_traceback(user_models: Path, model: str, message: str) -> None:
    r = geryon("tag", "--model", model, "--quiet", pythonpath=user_models)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1  # one clear line


def test_map_table_file_that_cannot_be_written(tmp_path: Path) -> None:
    r = geryon("tag", "--model", "alexnet", "--map-table", str(tmp_path / "missing" / "m.json"))
    assert r.returncode == 2
    assert "--map-table" in r.stderr and "its directory does not exist" in r.stderr
    assert "importing TensorFlow" not in r.stderr  # checked before the model is built
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro" / "m.json").mkdir()  # a directory where the file should go: the rename fails
    r = geryon("tag", "--model", "alexnet", "--quiet", "--map-table", str(tmp_path / "ro" / "m.json"))
    assert r.returncode == 2 and "Is a directory" in r.stderr
    assert list((tmp_path / "ro").iterdir()) == [tmp_path / "ro" / "m.json"]  # no temporary file left


def test_model_that_fails_to_trace_is_a_clear_error() -> None:
    r = geryon("tag", "--model", "alexnet", "--input-shape", "8,8,3", "--quiet")
    assert r.returncode == 2
    assert "could not be" in r.stderr and "Traceback" not in r.stderr


def test_other_input_size_says_the_head_is_dropped() -> None:
    r = geryon("tag", "--model", "mobilenetv2", "--input-shape", "96,96,3", "--json")
    assert r.returncode == 0, r.stderr
    assert "mobilenetv2 is built without its classifier head" in r.stderr
    assert json.loads(r.stdout)["summary"]["dense_share"] == 0.0
