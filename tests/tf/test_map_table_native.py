"""The native map_table: the text Python writes, parsed, validated and looked up by the C++ side.

Everything goes through the extension's real ops (GeryonSetMapTable, GeryonMapTable,
GeryonClassForEdge, GeryonRankForEdge) in this process. The store is process-wide and refuses older
versions, so each test installs versions above whatever is in force when it starts.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from geryon.tagger.map_table import MapTable
from geryon.tf.map_table_native import MAGIC, consumption_ranks, to_native

tf = pytest.importorskip("tensorflow")


@pytest.fixture(scope="module")
def ops() -> Any:
    from geryon.tf.strategy import native_ops

    return native_ops()


def installed(ops: Any) -> tuple[int, int, int, list[int]]:
    version, k, default, classes = ops.geryon_map_table()
    return int(version), int(k), int(default), [int(c) for c in classes.numpy()]


def next_table(ops: Any, thresholds: list[float] | None = None, default_class: int = 0) -> MapTable:
    version = installed(ops)[0] + 1
    names = ["net/conv/kernel", "net/conv/bias", "net/dense one/kernel", "net/dense one/bias"]
    return MapTable.build(names, [1.0, 0.75, 0.5, 0.25], thresholds or [0.6], "layer", version, default_class)


def test_text_format_is_line_based_with_counts_and_end() -> None:
    table = MapTable.build(["a/kernel", "a/bias"], [1.0, 0.2], [0.5], "layer", version=3, default_class=1)
    assert to_native(table).splitlines() == [
        MAGIC,
        "version 3",
        "classes 2",
        "default 1",
        "params 2",
        "0 0 0 a/kernel",  # <id> <class> <rank> <name>; ranks from urgency when not given
        "1 1 1 a/bias",
        "bindings 0",
        "end",
    ]
    bound = to_native(table, {"a/Read/ReadVariableOp": 0, "gradients/a_grad/tuple/control_dependency": 0})
    assert bound.splitlines()[-4:] == [
        "bindings 2",
        "0 a/Read/ReadVariableOp",
        "0 gradients/a_grad/tuple/control_dependency",
        "end",
    ]


def test_installed_table_reads_back_on_the_native_side(ops: Any) -> None:
    table = next_table(ops, thresholds=[0.3, 0.6, 0.9], default_class=2)
    assert int(ops.geryon_set_map_table(to_native(table))) == table.version
    assert installed(ops) == (table.version, 4, 2, [e.cls for e in table.entries])
    assert [e.cls for e in table.entries] == [0, 1, 2, 3]  # a name with a space survives too


def test_class_for_edge_parses_the_annotation_and_defaults_otherwise(ops: Any) -> None:
    table = next_table(ops, default_class=1)
    ops.geryon_set_map_table(to_native(table))
    edges = [
        "edge_16_net/conv/Cast/ReadVariableOp#gp=0",  # pull of parameter 0 (class 0)
        "edge_41_sgd/IdentityN#gp=3",  # push of parameter 3 (class 1)
        "edge_17_Add",  # carries no parameter: the default class
        "edge_9_x#gp=99",  # an id the table does not know: the default class
        "edge_9_x#gp=",  # malformed annotations carry no id
        "edge_9_x#gp=1a",
    ]
    classes, ids = ops.geryon_class_for_edge(edges)
    assert ids.numpy().tolist() == [0, 3, -1, 99, -1, -1]
    assert classes.numpy().tolist() == [0, 1, 1, 1, 1, 1]


def _lines(ops: Any) -> list[str]:
    return to_native(next_table(ops)).splitlines()


MALFORMED = {
    "format version 1": (
        lambda ls: ["geryon.map_table.native 1", *ls[1:]],
        "line 1: found format version '1', expected format version 2 ('geryon.map_table.native 2'",
    ),
    "garbage": (
        lambda ls: ["GIF89a", *ls[1:]],
        "line 1: found 'GIF89a' (no format version), expected format",
    ),
    "empty": (lambda ls: [], "line 1: found"),
    "truncated in the header": (lambda ls: ls[:3], "truncated after line 3"),
    "truncated in the parameters": (lambda ls: ls[:7], "truncated after line 7: expected 2 more parameter"),
    "no end": (lambda ls: ls[:-1], "expected 'end'"),
    "a line after end": (lambda ls: [*ls, "0 0 x"], "expected 'end' as the last line"),
    "version zero": (lambda ls: [ls[0], "version 0", *ls[2:]], "version '0' is not an integer in [1,"),
    "version not a number": (lambda ls: [ls[0], "version two", *ls[2:]], "version 'two'"),
    "one class": (lambda ls: [*ls[:2], "classes 1", *ls[3:]], "classes '1' is not an integer in [2, 8]"),
    "nine classes": (lambda ls: [*ls[:2], "classes 9", *ls[3:]], "classes '9'"),
    "default out of range": (
        lambda ls: [*ls[:3], "default 2", *ls[4:]],
        "default '2' is not an integer in [0, 1]",
    ),
    "header out of order": (lambda ls: [ls[0], ls[2], ls[1], *ls[3:]], "expected 'version <integer>'"),
    "class out of range": (
        lambda ls: [*ls[:5], "0 2 0 net/conv/kernel", *ls[6:]],
        "class '2' of parameter 0",
    ),
    "negative id": (
        lambda ls: [*ls[:5], "-1 0 0 net/conv/kernel", *ls[6:]],
        "line 6: expected '<id> <class>",
    ),
    "missing name": (lambda ls: [*ls[:5], "0 0 0", *ls[6:]], "line 6: expected '<id> <class> <rank> <name>'"),
    "a format 1 line (no rank)": (
        lambda ls: [*ls[:5], "0 0 net/conv/kernel", *ls[6:]],
        "line 6: expected '<id> <class> <rank> <name>'",
    ),
    "negative rank": (lambda ls: [*ls[:5], "0 0 -1 net/conv/kernel", *ls[6:]], "rank '-1' of parameter 0"),
    "rank not a number": (lambda ls: [*ls[:5], "0 0 first net/conv/kernel", *ls[6:]], "rank 'first'"),
    "duplicate id": (lambda ls: [*ls[:6], "0 1 5 other", *ls[7:]], "line 7: duplicate parameter id 0"),
    "duplicate name": (lambda ls: [*ls[:6], "1 1 5 net/conv/kernel", *ls[7:]], "duplicate parameter name"),
    "binding to an unknown id": (
        lambda ls: [*ls[:-2], "bindings 1", "9 w/read", "end"],
        "line 11: expected '<id> <producer>' with the id of a parameter listed above",
    ),
    "binding without a name": (lambda ls: [*ls[:-2], "bindings 1", "0", "end"], "line 11: expected '<id>"),
    "producer bound twice": (
        lambda ls: [*ls[:-2], "bindings 2", "0 w/read", "1 w/read", "end"],
        "line 12: producer 'w/read' is bound twice",
    ),
    "fewer bindings than announced": (lambda ls: [*ls[:-2], "bindings 2", "0 w/read", "end"], "line 12"),
    "fewer parameters than announced": (
        lambda ls: [*ls[:5], *ls[6:]],
        "line 9: expected '<id> <class> <rank> <name>'",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_table_is_refused_and_the_old_one_stays(ops: Any, case: str) -> None:
    good = next_table(ops)
    ops.geryon_set_map_table(to_native(good))
    before = installed(ops)
    mutate, message = MALFORMED[case]
    bad = "\n".join(mutate(to_native(next_table(ops)).splitlines())) + "\n"
    with pytest.raises(tf.errors.InvalidArgumentError, match="GeryonSetMapTable") as caught:
        ops.geryon_set_map_table(bad)
    assert message in caught.value.message
    assert installed(ops) == before


def test_versions_only_move_forward(ops: Any) -> None:
    table = next_table(ops)
    text = to_native(table)
    ops.geryon_set_map_table(text)
    # The same version again (another task of this process) is accepted when it is the same table.
    assert int(ops.geryon_set_map_table(text)) == table.version
    changed = to_native(table.with_thresholds([0.1])).replace(
        f"version {table.version + 1}", f"version {table.version}"
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="already installed with different contents"):
        ops.geryon_set_map_table(changed)
    older = text.replace(f"version {table.version}", f"version {table.version - 1}")
    if table.version > 1:
        with pytest.raises(tf.errors.InvalidArgumentError, match="older than the installed version"):
            ops.geryon_set_map_table(older)
    assert installed(ops)[0] == table.version


def test_table_input_must_be_a_scalar(ops: Any) -> None:
    with pytest.raises(tf.errors.InvalidArgumentError, match="must be a scalar string"):
        ops.geryon_set_map_table([to_native(next_table(ops))])


@pytest.mark.parametrize(("name", "field"), [("a\nb", "entries[0].name"), ("a\rb", "entries[0].name")])
def test_python_refuses_names_the_format_cannot_carry(name: str, field: str) -> None:
    table = MapTable.build([name], [1.0], [0.5], "layer")
    with pytest.raises(ValueError, match=field.replace("[", r"\[").replace("]", r"\]")):
        to_native(table)


def test_ranks_travel_with_the_table_and_resolve_per_edge(ops: Any) -> None:
    table = next_table(ops)
    # Consumption order 2, 0, 3, 1: parameter 2 is needed first.
    ops.geryon_set_map_table(to_native(table, ranks=consumption_ranks([2, 0, 3, 1])))
    edges = [
        "edge_1_a#gp=0",
        "edge_2_b#gp=1",
        "edge_3_c#gp=2",
        "edge_4_d#gp=3",
        "edge_5_plain",
        "edge_6_x#gp=77",
    ]
    # Unranked (no parameter, or one the table does not list): -1 here, after every ranked one on the wire.
    assert ops.geryon_rank_for_edge(edges).numpy().tolist() == [1, 3, 0, 2, -1, -1]
    # A new version with other classes keeps the ranks it is given.
    ops.geryon_set_map_table(to_native(table.with_thresholds([0.1]), ranks=consumption_ranks([3, 2, 1, 0])))
    assert ops.geryon_rank_for_edge(edges[:4]).numpy().tolist() == [3, 2, 1, 0]


@pytest.mark.parametrize(
    ("ranks", "field"), [({0: 0}, r"ranks\[1\]: None"), ({0: 0, 1: -2, 2: 1, 3: 3}, r"ranks\[1\]: -2")]
)
def test_python_refuses_missing_or_negative_ranks(ranks: dict[int, int], field: str) -> None:
    table = MapTable.build(["a", "b", "c", "d"], [1.0, 0.7, 0.4, 0.1], [0.5], "layer")
    with pytest.raises(ValueError, match=field):
        to_native(table, ranks=ranks)


def test_tf1_edges_resolve_through_producer_bindings(ops: Any) -> None:
    table = next_table(ops)  # classes 0, 0, 1, 1
    bindings = {"net/conv/kernel/Read/ReadVariableOp": 0, "gradients/dense_grad/tuple/control_dependency": 3}
    ops.geryon_set_map_table(to_native(table, bindings))
    edges = [
        "edge_12_net/conv/kernel/Read/ReadVariableOp",  # a pull, by its producer
        "edge_77_gradients/dense_grad/tuple/control_dependency",  # a push, by its producer
        "edge_12_net/conv/kernel/Read/ReadVariableOp#gp=2",  # an annotation wins
        "edge_5_unbound/ReadVariableOp",  # not bound: the default class
        "net/conv/kernel/Read/ReadVariableOp",  # not a partitioner-made edge name
    ]
    classes, ids = ops.geryon_class_for_edge(edges)
    assert ids.numpy().tolist() == [0, 3, 2, -1, -1]
    assert classes.numpy().tolist() == [0, 1, 1, 0, 0]


def test_default_class_before_any_table_comes_from_the_environment() -> None:
    script = textwrap.dedent(
        """
        from geryon.tf.strategy import native_ops
        ops = native_ops()
        version, k, default, classes = ops.geryon_map_table()
        c, _ = ops.geryon_class_for_edge(["edge_1_a#gp=0", "edge_2_b"])
        print("RESULT", int(version), int(k), int(default), c.numpy().tolist())
        """
    )
    env = dict(os.environ, GERYON_DEFAULT_CLASS="1", TF_CPP_MIN_LOG_LEVEL="2")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")), None)
    assert line is not None, out.stderr[-3000:]
    assert line == "RESULT 0 2 1 [1, 1]"
