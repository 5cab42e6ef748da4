"""Switch egress class counters move for the class the DSCP selects, on the port toward the receiver."""

from __future__ import annotations

from testbed.tbutil import needs_root

from geryon.testbed import TestbedSpec, up
from geryon.testbed.traffic import result, start_send, start_sink

pytestmark = needs_root
N = 400_000


def _delta(before: dict, after: dict, host: str) -> dict[int, dict[str, int]]:
    return {
        k: {f: after[host][k][f] - before[host].get(k, {}).get(f, 0) for f in after[host][k]}
        for k in after[host]
    }


def test_each_dscp_lands_in_its_class_and_replies_reflect_it(run_id: str) -> None:
    with up(TestbedSpec(hosts=("a", "b"), rate_bits=50_000_000, run_id=run_id)) as tb:
        start_sink(tb, "a")
        for dscp, cls in ((46, 0), (26, 1), (0, 1)):  # DSCP 0 is unmatched: the least urgent class
            before = tb.class_counters()
            r = result(start_send(tb, "b", "a", N, dscp))
            assert r["bytes"] == N
            d = _delta(before, tb.class_counters(), "a")
            assert d[cls]["bytes"] >= N, (dscp, d)
            assert d[1 - cls]["bytes"] < N // 10, (dscp, d)
            # The receiver's ACKs toward b carry the sender's DSCP (tcp_reflect_tos on every host).
            back = _delta(before, tb.class_counters(), "b")
            assert back[cls]["packets"] >= 50 and back[1 - cls]["packets"] < 20, (dscp, back)
        tb.set_switch("fifo")
        before = tb.class_counters()
        assert set(before["a"]) == {0}
        result(start_send(tb, "b", "a", N, 46))
        assert _delta(before, tb.class_counters(), "a")[0]["bytes"] >= N


def test_a_full_queue_counts_drops_in_its_class(run_id: str) -> None:
    spec = TestbedSpec(hosts=("a", "b", "c"), rate_bits=20_000_000, buffer_bytes=8192, run_id=run_id)
    with up(spec) as tb:
        start_sink(tb, "a")
        before = tb.class_counters()
        flows = [start_send(tb, src, "a", 1_500_000, 26, cc="cubic") for src in ("b", "c")]
        for f in flows:
            assert result(f)["bytes"] == 1_500_000
        d = _delta(before, tb.class_counters(), "a")
        assert d[1]["drops"] > 0 and d[0]["drops"] == 0, d
