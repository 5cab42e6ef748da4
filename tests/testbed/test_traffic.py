"""Real traffic through the switch: with strict priority a DSCP-46 transfer keeps the link rate while
a DSCP-26 bulk flow from another host saturates the same egress port; with one FIFO it does not."""

from __future__ import annotations

import time

import pytest
from testbed.tbutil import needs_root

from geryon.testbed import TestbedSpec, up
from geryon.testbed.traffic import (
    PACE_S,
    main,
    next_due,
    result,
    start_bulk,
    start_send,
    start_sink,
    stop_bulk,
)

pytestmark = needs_root
RATE = 40_000_000
URGENT = RATE // 8 // 5  # 0.2 s at the link rate
BULK = RATE // 8 * 2  # 2 s at the link rate


def test_urgent_flow_keeps_its_rate_only_with_priority_queues(run_id: str) -> None:
    with up(TestbedSpec(hosts=("recv", "bulk", "urgent"), rate_bits=RATE, run_id=run_id)) as tb:
        start_sink(tb, "recv")
        alone = result(start_send(tb, "urgent", "recv", URGENT, 46, cc="cubic"))
        seconds = {}
        for mode in ("priority", "fifo"):
            tb.set_switch(mode)
            before = tb.class_counters()["recv"]
            bulk = start_send(tb, "bulk", "recv", BULK, 26, cc="cubic")
            time.sleep(0.6)  # the bulk flow fills the port (and, in fifo, its queue)
            urgent = result(start_send(tb, "urgent", "recv", URGENT, 46, cc="cubic"))
            b = result(bulk)
            after = tb.class_counters()["recv"]
            assert b["seconds"] > 0.6 + urgent["seconds"], "the bulk flow ended before the urgent one"
            seconds[mode] = urgent["seconds"]
            if mode == "priority":
                assert after[0]["bytes"] - before[0]["bytes"] >= URGENT
                assert after[1]["bytes"] - before[1]["bytes"] >= BULK
            else:
                assert after[0]["bytes"] - before[0]["bytes"] >= URGENT + BULK
        ideal = URGENT * 8 / RATE
        # Alone and under strict priority: near the link rate. In one FIFO it waits behind the bulk queue.
        assert alone["seconds"] < 1.6 * ideal, alone
        assert seconds["priority"] < 1.6 * ideal, seconds
        assert seconds["fifo"] > 1.8 * seconds["priority"], seconds


def test_traffic_cli_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["send", "--to", "10.77.0.1:5001", "--bytes", "10", "--dscp", "64"])
    assert e.value.code == 2 and "--dscp" in capsys.readouterr().err


def test_bulk_background_keeps_its_rate_lands_in_the_last_class_and_stops_on_sigterm(run_id: str) -> None:
    rate = RATE // 5  # 8 Mbit/s on a 40 Mbit/s port: paced, so well under the link
    with up(TestbedSpec(hosts=("recv", "bg"), rate_bits=RATE, run_id=run_id)) as tb:
        start_sink(tb, "recv")
        before = tb.class_counters()["recv"]
        p = start_bulk(tb, "bg", "recv", rate, dscp=8, seconds=60)
        time.sleep(2.5)
        got = stop_bulk(p)
        after = tb.class_counters()["recv"]
        assert p.returncode == 0 and "error" not in got, got
        assert 2.0 < got["seconds"] < 10 and got["dscp"] == 8
        assert got["mbit_s"] == pytest.approx(rate / 1e6, rel=0.10), got
        # DSCP 8 matches no class of the default intent: the unmatched (last, bulk) queue.
        last = max(after)
        assert after[last]["bytes"] - before[last]["bytes"] >= 0.9 * got["bytes"]
        assert after[0]["bytes"] - before[0]["bytes"] < 0.01 * got["bytes"]


def test_bulk_cli_refuses_a_rate_below_1000_bits(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["bulk", "--to", "10.77.0.1:5001", "--rate-bits", "10"])
    assert e.value.code == 2 and "--rate-bits" in capsys.readouterr().err


def test_the_background_pacing_keeps_up_with_late_wakeups_but_never_catches_up_a_stall() -> None:
    step = PACE_S
    # On schedule, and woken a little late: the next step is due one step after the last due time.
    assert next_due(1.0, 1.0, step) == pytest.approx(1.0 + step)
    assert next_due(1.0, 1.0 + step / 2, step) == pytest.approx(1.0 + step)
    # Stalled for a second (the port was full): one step from now minus one, not a second of backlog.
    assert next_due(1.0, 2.0, step) == pytest.approx(2.0)
    # Over a stall and 100 steps after it, at most one step more than the rate allows is due.
    due, now, sent = 1.0, 2.0, 0
    for _ in range(100):
        due = next_due(due, now, step)
        sent += 1
        now = max(now, due)  # the send itself is instantaneous; the sender sleeps until due
    assert sent <= round((now - 2.0) / step) + 1  # a schedule kept from the start sent them all at 2.0
