"""TicTac's TAC (paper 000, Sec. 4.3, Algorithms 1 and 3) on hand-built DAGs whose order is worked out
by hand from the paper's definitions (P, M, M+ and Eq. 2), plus determinism, ties and the flag."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path

import pytest

from geryon.errors import UsageError
from geryon.tagger.cli import parse_op_times
from geryon.tagger.dag import ForwardGraph, GraphNode
from geryon.tagger.params import Parameter
from geryon.tagger.tac import OpTimes, OpTimesError, tac_order
from geryon.tagger.tagging import Tagging
from geryon.tagger.urgency import TimingRequired, compute_urgency


def _graph(spec: Sequence[tuple[str, Sequence[str]]], recvs: Sequence[str]) -> ForwardGraph:
    """Nodes as (name, input names); `x` is the model input, each name in `recvs` a parameter's recv."""
    index = {name: i for i, (name, _) in enumerate(spec)}
    nodes = [GraphNode(name, "Op", tuple(index[s] for s in inputs)) for name, inputs in spec]
    return ForwardGraph(
        nodes, frozenset({index["x"]}), {index[r]: k for k, r in enumerate(recvs)}, len(recvs)
    )


def _order(
    graph: ForwardGraph,
    compute: dict[str, float],
    transfer: Sequence[float],
    scan: Sequence[int] | None = None,
) -> list[int]:
    times = [compute.get(node.name, 0.0) for node in graph.nodes]
    return tac_order(graph, times, transfer, scan)


# Figure 5a (Case 1): two independent recvs, A -> op1 and B -> op2.
FIG5A = _graph([("x", []), ("A", []), ("B", []), ("op1", ["x", "A"]), ("op2", ["x", "B"])], ["A", "B"])


def test_case1_eq2_puts_the_transfer_that_overlaps_more_first() -> None:
    # M_A = 1, P_A = 10; M_B = 5, P_B = 1. Eq. 2: A first iff min(P_B, M_A) = 1 < min(P_A, M_B) = 5.
    # By the definition: A then B ends at 1 + max(10, 5) + 1 = 12, B then A at 5 + max(1, 1) + 10 = 16.
    assert _order(FIG5A, {"op1": 10, "op2": 1}, [1, 5]) == [0, 1]
    # Mirrored: now B is the short transfer with the long computation behind it, so B goes first.
    assert _order(FIG5A, {"op1": 1, "op2": 10}, [5, 1]) == [1, 0]


def test_case1_equal_makespans_are_a_tie_kept_in_scan_order() -> None:
    # M_A = M_B = 1, P_A = 1, P_B = 8: both orders end at 10 (min(8, 1) = min(1, 1)); M+ is inf for both.
    assert _order(FIG5A, {"op1": 1, "op2": 8}, [1, 1]) == [0, 1]
    assert _order(FIG5A, {"op1": 1, "op2": 8}, [1, 1], scan=[1, 0]) == [1, 0]


# Figure 5b (Case 2): op1 needs A and B, op2 needs op1 and C, op3 needs op2 and D.
FIG5B = _graph(
    [
        ("x", []),
        ("A", []),
        ("B", []),
        ("C", []),
        ("D", []),
        ("op1", ["x", "A", "B"]),
        ("op2", ["op1", "C"]),
        ("op3", ["op2", "D"]),
    ],
    ["A", "B", "C", "D"],
)


def test_case2_all_p_zero_so_m_plus_decides() -> None:
    # Round 1: every op waits for >= 2 recvs, so every P is 0; M+(A) = M+(B) = 2 < M+(C) = 3 < M+(D) = 4
    # (unit transfers): A and B before C before D, as the paper says. A and B tie: scan order keeps A.
    # Round 2 (R = B, C, D): op1 waits for B alone, so P_B = Time(op1) = 1 > 0 and B precedes C.
    compute = {"op1": 1.0, "op2": 1.0, "op3": 1.0}
    assert _order(FIG5B, compute, [1, 1, 1, 1]) == [0, 1, 2, 3]
    assert _order(FIG5B, compute, [1, 1, 1, 1], scan=[3, 2, 1, 0]) == [1, 0, 2, 3]
    # Zero compute (TIC's general oracle, Eq. 1): still M+ alone, the same order.
    assert _order(FIG5B, {}, [1, 1, 1, 1]) == [0, 1, 2, 3]


CHAIN = _graph(
    [
        ("x", []),
        ("w0", []),
        ("w1", []),
        ("w2", []),
        ("c0", ["x", "w0"]),
        ("c1", ["c0", "w1"]),
        ("c2", ["c1", "w2"]),
    ],
    ["w0", "w1", "w2"],
)


def test_a_chain_goes_in_layer_order_whatever_the_times() -> None:
    # Round k: layer k's op waits for w_k alone (P > 0), every later P is 0, so Eq. 2 puts w_k first:
    # min(P_later = 0, M_k) = 0 < min(P_k, M_later). (Algorithm 3 as printed, A = min(P_A, M_B), would
    # put w1 before w0 here: the module docstring says why we follow Eq. 2 and the authors' code.)
    rng = random.Random(7)
    for _ in range(20):
        compute = {f"c{i}": rng.uniform(0.1, 5) for i in range(3)}
        transfer = [rng.uniform(0.1, 5) for _ in range(3)]
        assert _order(CHAIN, compute, transfer) == [0, 1, 2]


# An Inception-like block: a stem, three towers of one conv each, their concat, a head.
BLOCK_SPEC = [
    ("x", []),
    ("w0", []),
    ("wa", []),
    ("wb", []),
    ("wc", []),
    ("wh", []),
    ("stem", ["x", "w0"]),
    ("a", ["stem", "wa"]),
    ("b", ["stem", "wb"]),
    ("c", ["stem", "wc"]),
    ("cat", ["a", "b", "c"]),
    ("head", ["cat", "wh"]),
]
RECVS = ["w0", "wa", "wb", "wc", "wh"]
BLOCK = _graph(BLOCK_SPEC, RECVS)


def test_towers_with_different_compute_go_heaviest_first() -> None:
    # Transfers 4 each; compute stem 1, a 1, b 2, c 8, head 1. Round 1: P(w0) = 1, the rest 0: w0.
    # Round 2: P = (a 1, b 2, c 8); wc vs wa: min(P_a, M_c) = 1 < min(P_c, M_a) = 4, so wc first
    # (wc then wa ends at 4 + max(8, 4) + 1 = 13, wa then wc at 4 + max(1, 4) + 8 = 16); then wb
    # (min(1, 4) < min(2, 4)), wa, and the head's wh last.
    compute = {"stem": 1, "a": 1, "b": 2, "c": 8, "head": 1}
    assert _order(BLOCK, compute, [4] * 5) == [0, 3, 2, 1, 4]
    # Uniform compute: every P is 1, Eq. 2 ties (min(1, 4) both ways), M+ ties: consumption order.
    assert _order(BLOCK, dict.fromkeys(compute, 1.0), [4] * 5) == [0, 1, 2, 3, 4]


def test_order_does_not_depend_on_node_numbering_and_is_repeatable() -> None:
    compute = {"stem": 0.1, "a": 0.3, "b": 0.2, "c": 0.7, "head": 0.1}
    transfer = [0.2, 0.4, 0.4, 0.4, 0.9]
    expected = _order(BLOCK, compute, transfer)
    assert _order(BLOCK, compute, transfer) == expected
    rng = random.Random(3)
    for _ in range(10):
        spec = BLOCK_SPEC[:]
        rng.shuffle(spec)  # node indices change, the DAG does not (recvs keep their parameter index)
        assert _order(_graph(spec, RECVS), compute, transfer) == expected


def _params(names: Sequence[str]) -> list[Parameter]:
    return [Parameter(n, n, (2,), "float32", 4, n) for n in names]


def test_tagging_with_tac_and_its_urgency_form() -> None:
    params = _params(RECVS)
    tic = Tagging.from_graph(params, BLOCK, "tic")
    times = OpTimes({"stem": 1, "a": 1, "b": 2, "c": 8, "head": 1}, dict.fromkeys(RECVS, 4.0), "hand")
    tac = tic.with_tac(times)
    assert tac.urgency_function == "tac" and tac.times_source == "hand"
    # 1 - k/N in TAC order w0, wc, wb, wa, wh: distinct, in [0, 1 - 1/N].
    assert tac.urgency == pytest.approx((1 - 1 / 5, 1 - 4 / 5, 1 - 3 / 5, 1 - 2 / 5, 0.0))
    # TIC ties the towers (M = 2 each); TAC separates them by their compute, so the orders differ.
    assert tic.urgency[1] == tic.urgency[2] == tic.urgency[3]
    assert tac.with_urgency("tic") == tic


def test_tac_without_times_and_bad_times_say_so() -> None:
    params = _params(RECVS)
    with pytest.raises(TimingRequired, match="urgency 'tac' needs op times"):
        Tagging.from_graph(params, BLOCK, "tac")
    with pytest.raises(TimingRequired):
        compute_urgency("tac", params, Tagging.from_graph(params, BLOCK, "tic").consumption)
    tagging = Tagging.from_graph(params, BLOCK, "tic")
    with pytest.raises(OpTimesError, match="no transfer time for wh"):
        tagging.with_tac(OpTimes({}, dict.fromkeys(RECVS[:-1], 1.0)))
    with pytest.raises(OpTimesError, match="nodes not in the model's graph: nope"):
        tagging.with_tac(OpTimes({"nope": 1.0}, dict.fromkeys(RECVS, 1.0)))
    with pytest.raises(OpTimesError, match=r"transfer_s\['w0'\]"):
        OpTimes({}, {"w0": -1.0})


def test_cli_flag_checks(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--urgency tac needs --op-times FILE"):
        parse_op_times("tac", None)
    with pytest.raises(UsageError, match="--op-times: only with --urgency tac"):
        parse_op_times("tic", "x.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(UsageError, match="--op-times: op times: expected a JSON object"):
        parse_op_times("tac", str(bad))
    good = tmp_path / "t.json"
    OpTimes({"a": 1.0}, {"w": 2.0}, "hand").save(good)
    assert parse_op_times("tac", str(good)) == OpTimes({"a": 1.0}, {"w": 2.0}, "hand")
    assert parse_op_times("layer", None) is None


def test_the_tag_command_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    from geryon.cli import main

    assert main(["tag", "--model", "alexnet", "--urgency", "tac", "--quiet"]) == 2
    assert "--op-times" in capsys.readouterr().err
