"""The partition plan against TensorFlow's own partitioners (no cluster needed)."""

from __future__ import annotations

import json
import random

import pytest
import tensorflow as tf

from geryon.tagger.partition import (
    BYTES_PER_STRING,
    num_shards,
    parse_size,
    plan_partitions,
    shard_rows,
)
from geryon.tagger.tf_partitioner import GeryonPartitioner

MaxSizePartitioner = tf.distribute.experimental.partitioners.MaxSizePartitioner
FixedShardsPartitioner = tf.distribute.experimental.partitioners.FixedShardsPartitioner

DTYPES = [
    tf.bool,
    tf.int8,
    tf.float16,
    tf.bfloat16,
    tf.float32,
    tf.int64,
    tf.float64,
    tf.complex128,
    tf.string,
]


def element_size(dtype: tf.DType) -> int:
    return BYTES_PER_STRING if dtype == tf.string else dtype.size


def grid() -> list[tuple[tuple[int, ...], tf.DType, int]]:
    """A deterministic grid of (shape, dtype, bytes) with dims >= 1 (TF divides by zero otherwise)."""
    rng = random.Random(20240601)
    thresholds = [1, 3, 4, 7, 64, 1000, 1023, 4096, 65537, 1 << 20, 4 << 20]
    cases = []
    for _ in range(400):
        rank = rng.randint(1, 4)
        dims = [rng.choice([1, 2, 3, 5, 8, 13, 64, 100, 257, 4096]) for _ in range(rank)]
        if rng.random() < 0.2:  # a few large leading dims, like embeddings and FC kernels
            dims[0] = rng.choice([25088, 100003, 1 << 20])
        cases.append((tuple(dims), rng.choice(DTYPES), rng.choice(thresholds)))
    # VGG-19's biggest kernels, at the paper's thresholds.
    cases += [((25088, 4096), tf.float32, b) for b in (256 << 10, 512 << 10, 1 << 20, 4 << 20)]
    cases += [((3, 3, 512, 512), tf.float32, b) for b in (256 << 10, 512 << 10, 1 << 20, 4 << 20)]
    return cases


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1048576", 1 << 20),
        (" 42 ", 42),
        ("512B", 512),
        ("1024K", 1 << 20),
        ("1024k", 1 << 20),
        ("256KiB", 256 << 10),
        ("256 kib", 256 << 10),
        ("4M", 4 << 20),
        ("4MiB", 4 << 20),
        ("1G", 1 << 30),
        ("1GiB", 1 << 30),
        ("500kB", 500_000),
        ("500KB", 500_000),  # case-insensitive: KB is the decimal kilobyte, unlike K
        ("2MB", 2_000_000),
        ("1GB", 1_000_000_000),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "K", "1.5M", "-1K", "-5", "1024X", "1 0", "1024KK", "0", "0K", "0x10", "1e6"]
)
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size") as info:
        parse_size(text)
    assert repr(text) in str(info.value)
    assert "K/KiB" in str(info.value)  # the message lists the allowed forms


def test_parse_size_rejects_non_string() -> None:
    with pytest.raises(TypeError, match="string"):
        parse_size(1024)  # type: ignore[arg-type]


def test_shard_rows_div_strategy() -> None:
    assert shard_rows(13, 5) == [3, 3, 3, 2, 2]
    assert shard_rows(10, 4) == [3, 3, 2, 2]
    assert shard_rows(12, 4) == [3, 3, 3, 3]
    assert shard_rows(7, 7) == [1] * 7
    assert shard_rows(5, 1) == [5]
    assert shard_rows(0, 1) == [0]


@pytest.mark.parametrize(
    ("dim0", "n", "match"),
    [
        (3, 4, "between 1 and dim0=3"),
        (0, 2, "between 1 and dim0=0"),
        (5, 0, r"n \(number of shards\) must be an integer >= 1"),
        (-1, 1, "dim0 must be an integer >= 0"),
    ],
)
def test_shard_rows_rejects(dim0: int, n: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        shard_rows(dim0, n)


def test_num_shards_edge_cases() -> None:
    assert num_shards((), 4, 8, 1) == 1  # rank 0 is never partitioned
    assert num_shards((0, 3), 4, 8, 1) == 1  # TF rejects 0 partitions: stay one piece
    assert num_shards((5, 0), 4, 8, 1) == 5  # zero-byte rows: no slicing, still one shard per PS (capped)
    assert num_shards((3, 10), 4, 8, None) == 3  # capped at shape[0]
    assert num_shards((100,), 4, 8, None) == 8  # one shard per PS
    assert num_shards((100,), 4, 1, None) == 1
    assert num_shards((100,), 4, 2, 40) == 10  # 10 rows of 4 B per 40 B slice
    assert num_shards((100,), 4, 2, 41) == 10
    assert num_shards((100,), 4, 2, 39) == 12  # 9 rows per slice
    assert num_shards((100,), 4, 20, 40) == 20  # the PS count wins when it is larger
    assert num_shards((2, 1 << 20), 4, 1, 1024) == 2  # a row bigger than the threshold cannot be split
    # Paper-sized: VGG-19 fc6 kernel, 392 MiB of float32, 1 MiB slices -> 25088 / 64 rows = 392.
    assert num_shards((25088, 4096), 4, 8, 1 << 20) == 392


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (((4,), 4, 0, None), "num_ps"),
        (((4,), 4, True, None), "num_ps"),
        (((4,), 4, 2, 0), "slice_bytes"),
        (((4,), 4, 2, 1.5), "slice_bytes"),
        (((4,), 0, 2, None), "element_size"),
        (((None, 4), 4, 2, None), "fully defined"),
        (((-1, 4), 4, 2, None), "shape"),
        (("44", 4, 2, None), "shape"),
    ],
)
def test_num_shards_validates(args: tuple, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        num_shards(*args)


@pytest.mark.parametrize(("shape", "dtype", "max_bytes"), grid())
def test_slicing_matches_tf_max_size_partitioner(
    shape: tuple[int, ...], dtype: tf.DType, max_bytes: int
) -> None:
    tf_shards = MaxSizePartitioner(max_bytes)(tf.TensorShape(shape), dtype)[0]
    assert num_shards(shape, element_size(dtype), 1, max_bytes) == min(tf_shards, shape[0])


@pytest.mark.parametrize("num_ps", [1, 2, 3, 8, 13])
def test_no_slicing_matches_tf_fixed_shards_partitioner(num_ps: int) -> None:
    for shape, dtype, _ in grid():
        tf_shards = FixedShardsPartitioner(num_ps)(tf.TensorShape(shape), dtype)[0]
        assert num_shards(shape, element_size(dtype), num_ps, None) == min(tf_shards, shape[0]), shape


@pytest.mark.parametrize("num_ps", [1, 3, 8])
def test_geryon_partitioner_is_max_of_tf_partitioners(num_ps: int) -> None:
    for shape, dtype, max_bytes in grid():
        tf_shape = tf.TensorShape(shape)
        expected = max(
            FixedShardsPartitioner(num_ps)(tf_shape, dtype)[0],
            MaxSizePartitioner(max_bytes)(tf_shape, dtype)[0],
        )
        got = GeryonPartitioner(num_ps, max_bytes)(tf_shape, dtype)
        assert got == [min(expected, shape[0])] + [1] * (len(shape) - 1), (shape, dtype, max_bytes)


def test_geryon_partitioner_arguments() -> None:
    partitioner = GeryonPartitioner(4, None)
    assert partitioner([10, 3], tf.float32) == [4, 1]
    assert partitioner(tf.TensorShape([]), tf.float32) == []
    # tf.string has dtype.size 0; it is counted at 16 bytes like TF's partitioners do.
    assert GeryonPartitioner(1, 160)([100], tf.string) == [10]
    with pytest.raises(ValueError, match="axis 0"):
        partitioner([10, 3], tf.float32, axis=1)
    with pytest.raises(ValueError, match="fully defined"):
        partitioner(tf.TensorShape([None, 3]), tf.float32)
    with pytest.raises(ValueError, match="num_ps"):
        GeryonPartitioner(0, None)
    with pytest.raises(ValueError, match="slice_bytes"):
        GeryonPartitioner(2, -1)


def test_plan_partitions_round_robin() -> None:
    plan = plan_partitions([("s", (), 4), ("w", (13, 2), 4), ("b", (2,), 8)], num_ps=5, slice_bytes=None)
    scalar, kernel, bias = plan.params
    assert [(s.name, s.shape, s.offset, s.bytes, s.ps_task) for s in scalar] == [("s", (), 0, 4, 0)]
    # The counter advances once per shard: w's shards follow s on tasks 1, 2, 3, 4, then wrap.
    assert [(s.name, s.shape, s.offset, s.ps_task) for s in kernel] == [
        ("w/part_0", (3, 2), 0, 1),
        ("w/part_1", (3, 2), 3, 2),
        ("w/part_2", (3, 2), 6, 3),
        ("w/part_3", (2, 2), 9, 4),
        ("w/part_4", (2, 2), 11, 0),
    ]
    assert [(s.name, s.shape, s.ps_task, s.device) for s in bias] == [
        ("b/part_0", (1,), 1, "/job:ps/task:1"),
        ("b/part_1", (1,), 2, "/job:ps/task:2"),
    ]
    assert plan.total_shards == 8
    assert plan.bytes_per_ps() == [4 + 16, 24 + 8, 24 + 8, 24, 16]
    assert sum(plan.bytes_per_ps()) == 4 + 13 * 2 * 4 + 2 * 8
    as_json = json.loads(json.dumps(plan.to_dict()))
    assert as_json["total_shards"] == 8
    assert as_json["params"][1]["shards"][3] == {
        "parent": "w",
        "index": 3,
        "name": "w/part_3",
        "shape": [2, 2],
        "offset": 9,
        "bytes": 16,
        "ps_task": 4,
    }


def test_plan_partitions_slicing_and_unsharded_names() -> None:
    plan = plan_partitions([("e", (0, 3), 4), ("k", (100, 10), 4), ("one", (1, 8), 4)], 2, parse_size("1K"))
    assert [s.name for s in plan.params[0]] == ["e"]  # not sharded: keeps its own name
    assert len(plan.params[1]) == 4  # 40 B rows, 25 rows per 1 KiB slice
    assert max(s.bytes for s in plan.params[1]) <= 1024
    assert [s.name for s in plan.params[2]] == ["one"]
    assert [s.ps_task for s in plan.shards()] == [0, 1, 0, 1, 0, 1]


@pytest.mark.parametrize(
    ("params", "num_ps", "slice_bytes", "match"),
    [
        ([("a", (2,), 4)], 0, None, "num_ps"),
        ([("a", (2,), 4)], 2, 0, "slice_bytes"),
        ([("a", (None,), 4)], 2, None, r"params\[0\] \('a'\): shape"),
        ([("a", (2,), 4), ("b", (2,), 0)], 2, None, r"params\[1\] \('b'\): element_size"),
        ([("a", (2,))], 2, None, r"params\[0\] must be \(name, shape, element_size\)"),
        ([("", (2,), 4)], 2, None, "name"),
        ("abc", 2, None, "params must be"),
    ],
)
def test_plan_partitions_validates(params: object, num_ps: int, slice_bytes: int | None, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        plan_partitions(params, num_ps, slice_bytes)  # type: ignore[arg-type]
