"""Transfer order and overlap: the measures on hand-made intervals, and the RecvTensor records of a
real traced TF PS step (in-process servers in a subprocess, tests/ps_cluster.py)."""

from __future__ import annotations

import pytest

from geryon.threshold.transfer_order import Recv, interleave, kendall_tau, mean_in_flight, wire_intervals
from tests.ps_cluster import run_in_ps_cluster


def test_kendall_tau() -> None:
    assert kendall_tau("abcd", "abcd") == 1.0
    assert kendall_tau("dcba", "abcd") == -1.0
    assert kendall_tau("bacd", "abcd") == pytest.approx(1 - 2 / 6)
    with pytest.raises(ValueError, match="same distinct items"):
        kendall_tau("abc", "abd")


def test_in_flight_and_interleave() -> None:
    serial = [(0, 1), (1, 2), (2, 3)]
    assert mean_in_flight(serial) == pytest.approx(1.0)
    assert interleave(serial) == 0.0
    together = [(0, 2), (0, 2), (0, 2)]
    assert mean_in_flight(together) == pytest.approx(3.0)
    assert interleave(together) == pytest.approx(1.0)
    # Two transfers overlap for half of each: half of the summed time is shared.
    assert interleave([(0, 2), (1, 3)]) == pytest.approx(0.5)
    assert interleave([]) == 0.0 and mean_in_flight([]) == 0.0


def test_wire_intervals_per_connection() -> None:
    a, w = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"
    b = a.replace("task:0", "task:1")
    recvs = [Recv("x", a, w, 0, 10), Recv("y", a, w, 0, 30), Recv("z", b, w, 5, 20)]
    # y waited behind x on PS 0's connection; z is alone on PS 1's.
    assert wire_intervals(recvs) == [(0, 10), (10, 30), (5, 20)]


def test_recvs_of_a_real_traced_step() -> None:
    result = run_in_ps_cluster(
        """
        from geryon.threshold.transfer_order import recvs
        tf1 = tf.compat.v1
        g = tf.Graph()
        with g.as_default():
            setter = tf1.train.replica_device_setter(
                ps_tasks=NUM_PS, worker_device="/job:worker/task:0", cluster=cluster_spec)
            with tf1.device(setter):
                h = tf1.random_normal([4, 8])
                for i in range(3):
                    w = tf1.get_variable(f"l{i}/kernel", [8, 8])
                    b = tf1.get_variable(f"l{i}/bias", [8])
                    h = tf.matmul(h, w) + b
                loss = tf.reduce_sum(h)  # fetched: else grappler prunes the last bias add
                train = tf1.train.GradientDescentOptimizer(0.1).minimize(loss)
                init = tf1.global_variables_initializer()
        sess = tf1.Session(_servers[0].target, graph=g)
        sess.run(init)
        md = tf1.RunMetadata()
        trace = tf1.RunOptions(trace_level=tf1.RunOptions.FULL_TRACE)
        sess.run([train, loss], options=trace, run_metadata=md)
        pulls = [r for r in recvs(md.step_stats, "/job:worker/")
                 if g.get_operation_by_name(r.node).type == "ReadVariableOp"]
        emit({
            "pulled": sorted(g.get_operation_by_name(r.node).inputs[0].op.name for r in pulls),
            "sources": sorted({r.src for r in pulls}),
            "ok_times": all(r.end_us >= r.start_us > 0 for r in pulls),
            "by_arrival": [r.end_us for r in pulls] == sorted(r.end_us for r in pulls),
        })
        """,
        num_ps=2,
        timeout=180,
    )
    assert result["pulled"] == sorted(f"l{i}/{k}" for i in range(3) for k in ("bias", "kernel"))
    assert result["sources"] == [f"/job:ps/replica:0/task:{i}/device:CPU:0" for i in range(2)]
    assert result["ok_times"] and result["by_arrival"]
