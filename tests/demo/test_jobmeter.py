"""The demo chief's job meter (geryon.demo.jobmeter) against a real etcd: the job is registered only
once a whole window is measured, with what was measured, and closing frees it at once."""

from __future__ import annotations

import json

from jobs.etcd_server import start_cluster

from geryon.demo import jobmeter
from geryon.jobs import etcd, keys

CLUSTER = {"chief": ["10.0.0.9:2222"], "ps": ["10.0.0.1:2222"], "worker": ["10.0.0.2:2222", "10.0.0.3:2222"]}


def test_tasks_are_the_cluster_specs_chief_ps_and_workers() -> None:
    assert jobmeter.tasks_of(CLUSTER) == {
        "chief:0": "10.0.0.9:2222",
        "ps:0": "10.0.0.1:2222",
        "worker:0": "10.0.0.2:2222",
        "worker:1": "10.0.0.3:2222",
    }
    assert jobmeter.from_spec({"cluster": CLUSTER}, 1000) is None  # no "register": nothing


def test_the_first_measured_window_registers_the_job_and_close_frees_it() -> None:
    store = start_cluster(1)
    try:
        client = etcd.Client(store.endpoints, timeout=2)
        spec = {
            "cluster": CLUSTER,
            "register": {"etcd": ",".join(store.endpoints), "job": "j1", "compute_s": 0.1, "window": 3},
        }
        meter = jobmeter.from_spec(spec, 4_000_000)
        assert meter is not None
        key = keys.job(keys.DEFAULT_PREFIX, "j1")
        try:
            meter.step(0.5)
            meter.step(0.4)
            assert client.get(key) is None  # no whole window yet: not registered on a guess
            meter.step(0.45)
            value = client.get(key)
            assert value is not None
            record = json.loads(value.value)
            assert record["intensity"] == {"compute_s": 0.1, "iteration_s": 0.45, "bytes": 8_000_000}
            assert sorted(record["tasks"]) == ["chief:0", "ps:0", "worker:0", "worker:1"]
            for s in (0.2, 0.2, 0.2):  # twice as fast: re-registered
                meter.step(s)
            assert json.loads(client.get(key).value)["intensity"]["iteration_s"] == 0.2
        finally:
            meter.close()
        assert client.get(key) is None
    finally:
        store.stop()
