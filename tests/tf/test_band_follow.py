"""A band change from the cluster view reaches a training job's open flows within 1 s (issue 39).

A real etcd and a real 1 PS + 2 worker cluster on grpc+geryon whose tasks follow job "joba" on host
"hosta" (GERYON_BANDS_ETCD, GERYON_JOB, GERYON_BANDS_HOST: geryon.tf.band_follow). While the chief
trains, the test writes the host's bands key as `geryon controller` does, moving the job's classes
[0, 1] to fabric classes [1, 2]; loopback packets are captured as they leave (AF_PACKET, root). Each
of the four directions (pulls PS -> worker and their requests, gradients worker -> PS and theirs)
must carry the new class's DSCP within 1 s of the write and never the old one after that, with no
failed step and no flow reconnected; the tasks' own gRPC packets carry class 0's new DSCP too.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from jobs.etcd_server import start_cluster
from tf.loopback_capture import LoopbackCapture
from tf.tf_cluster import CNN_BODY, TfCluster, data_port
from waiting import wait_until

from geryon.errors import UsageError
from geryon.jobs import etcd, keys
from geryon.tf.band_follow import BandFollower, follower_from_env, job_marks
from geryon.tf.build import build

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="capturing loopback packets needs root"),
]
JOB, HOST = "joba", "hosta"
EF, AF31, AF21 = 46, 26, 18  # the data plane's default DSCP of classes 0, 1 and 2
REACH_S = 1.0  # the bound: a band change reaches every task within 1 s


@pytest.fixture(scope="module", autouse=True)
def _built() -> None:
    build()


def put_bands(client: etcd.Client, generation: int, band: list[int]) -> None:
    value = {"generation": generation, "queues": 4, "jobs": {JOB: band}}
    client.put(keys.host(keys.DEFAULT_PREFIX, HOST), json.dumps(value))


def test_job_marks_follow_the_fabric_classes_of_the_band() -> None:
    fabric = [(46, 6), (26, 0), (18, 2), (10, 2)]
    assert job_marks({0: 1, 1: 2}, fabric, 2) == ([26, 18], [0, 2])
    assert job_marks({}, fabric, 2) == ([46, 26], [6, 0])  # no band: the job's classes as they are
    with pytest.raises(ValueError, match="fabric class 4"):
        job_marks({0: 4}, fabric, 1)


FABRIC = [(46, 6), (26, 0), (18, 2), (10, 2)]


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"GERYON_BANDS_ETCD": "ftp://x"}, "GERYON_BANDS_ETCD"),
        ({"GERYON_BANDS_ETCD": "http://127.0.0.1:2379"}, "GERYON_JOB"),
        (
            {"GERYON_BANDS_ETCD": "http://127.0.0.1:2379", "GERYON_JOB": "a", "GERYON_BANDS_HOST": "a b"},
            "GERYON_BANDS_HOST",
        ),
        (
            {"GERYON_BANDS_ETCD": "http://127.0.0.1:2379", "GERYON_JOB": "a", "GERYON_BANDS_PREFIX": "x"},
            "prefix",
        ),
        (
            {
                "GERYON_BANDS_ETCD": "http://127.0.0.1:2379",
                "GERYON_JOB": "a",
                "GERYON_BANDS_CACERT": "/ca.pem",
            },
            "GERYON_BANDS_CACERT given, but no endpoint is https",
        ),
        (
            {
                "GERYON_BANDS_ETCD": "https://10.0.0.1:2379",
                "GERYON_JOB": "a",
                "GERYON_BANDS_CACERT": "/no/ca.pem",
            },
            "GERYON_BANDS_CACERT '/no/ca.pem': not a readable PEM CA bundle",
        ),
        (
            {"GERYON_BANDS_ETCD": "https://10.0.0.1:2379", "GERYON_JOB": "a", "GERYON_BANDS_KEY": "/k.pem"},
            "GERYON_BANDS_KEY given without GERYON_BANDS_CERT",
        ),
    ],
)
def test_a_bad_environment_is_refused_naming_the_variable(env: dict[str, str], names: str) -> None:
    with pytest.raises(UsageError, match=names):
        follower_from_env(lambda d, p: 0, FABRIC, env)


def test_without_an_etcd_nothing_follows() -> None:
    assert follower_from_env(lambda d, p: 0, FABRIC, {"GERYON_JOB": "a"}) is None


def test_a_new_band_is_applied_and_a_generation_without_the_job_keeps_the_marks() -> None:
    calls: list[tuple[list[int], list[int]]] = []
    follower = BandFollower(
        etcd.Client("http://127.0.0.1:1"),
        HOST,
        JOB,
        FABRIC,
        lambda d, p: calls.append((d, p)) or 3,
        classes=2,
    )
    follower._on_change({JOB: {0: 1, 1: 3}, "other": {0: 0}}, 4)
    follower._on_change({"other": {0: 0}}, 5)  # the job's lease ran out: keep what is in force
    assert calls == [([26, 10], [0, 2])]
    assert [(a.generation, a.band, a.remarked) for a in follower.applied] == [(4, {0: 1, 1: 3}, 3)]


def test_a_band_change_re_marks_every_open_flow_of_the_job_within_a_second(tmp_path: Path) -> None:
    store = start_cluster(1)
    try:
        client = etcd.Client(store.endpoints, timeout=2)
        put_bands(client, 1, [0, 1])  # the job's classes as they are, before the tasks start
        env = {"GERYON_BANDS_ETCD": ",".join(store.endpoints), "GERYON_JOB": JOB, "GERYON_BANDS_HOST": HOST}
        progress = tmp_path / "progress"
        with (
            TfCluster(
                num_ps=1, num_workers=2, env=env, job_env={"ps": {"GERYON_DEFAULT_CLASS": "1"}}
            ) as cluster,
            LoopbackCapture(timeline=True).running() as capture,
        ):
            result: dict[str, Any] = {}
            args = {"steps": 400, "max_seconds": 14, "progress_file": str(progress)}
            chief = threading.Thread(target=lambda: result.update(cluster.run_chief(CNN_BODY, args=args)))
            chief.start()
            wait_until(
                "3 steps",
                lambda: progress.read_text() if progress.exists() else "0",
                lambda n: n.strip().isdigit() and int(n) >= 3,
                timeout=120,
                interval=0.1,
            )
            changed = time.monotonic()
            put_bands(client, 2, [1, 2])
            chief.join(timeout=120)
            time.sleep(0.6)  # the servers write their counters every 0.2 s
            counters = {name: cluster.counters(name) for name in ("ps0", "worker0", "worker1")}
            ps_port = data_port(cluster.cluster["ps"][0])
            worker_ports = {data_port(a) for a in cluster.cluster["worker"]}
            stderr = {name: cluster.stderr(name) for name in ("ps0", "worker0", "worker1")}
    finally:
        store.stop()

    assert "error" not in result and result.get("losses"), result
    assert all(math.isfinite(x) for x in result["losses"])
    steps_after = int(progress.read_text()) - 3
    assert steps_after >= 5, f"only {steps_after} steps after the change: too few to see it"

    ps_consumer_ports = {c["local_port"] for c in counters["ps0"] if c["role"] == "consumer"}
    worker_consumer_ports = {
        c["local_port"] for name in ("worker0", "worker1") for c in counters[name] if c["role"] == "consumer"
    }
    assert packets_classified(capture, ps_port, worker_ports, ps_consumer_ports, worker_consumer_ports)
    directions = {
        # (what, packet test, DSCP before, DSCP after): pulls ride class 0, gradients class 1.
        "pulls (PS -> worker)": (lambda s, d: s == ps_port and d in worker_consumer_ports, EF, AF31),
        "pull requests (worker -> PS)": (lambda s, d: s in worker_consumer_ports and d == ps_port, EF, AF31),
        "gradients (worker -> PS)": (lambda s, d: s in worker_ports and d in ps_consumer_ports, AF31, AF21),
        "gradient requests (PS -> worker)": (
            lambda s, d: s in ps_consumer_ports and d in worker_ports,
            AF31,
            AF21,
        ),
    }
    assert capture.packets is not None
    for what, (match, before, after) in directions.items():
        seen = [(t - changed, dscp) for t, s, d, dscp, _ in capture.packets if match(s, d)]
        assert {dscp for t, dscp in seen if t < 0} == {before}, (what, sorted({x for _, x in seen}))
        first_new = min((t for t, dscp in seen if dscp == after), default=None)
        assert first_new is not None, f"{what}: no packet with DSCP {after} after the change"
        late_old = [t for t, dscp in seen if t > REACH_S and dscp != after]
        print(f"{what}: DSCP {before} -> {after}, first new packet {first_new * 1e3:.0f} ms after the write")
        assert first_new <= REACH_S, f"{what}: first packet with DSCP {after} at {first_new:.2f} s"
        assert not late_old, f"{what}: {len(late_old)} packets with the old marks after {REACH_S} s"
    # TF's own gRPC (the step calls' replies, the tasks' channels to each other) follows the band's
    # class 0 too (geryon.tf.control_marks): EF before the change (or unmarked until the first scan),
    # AF31 once the new band is applied.
    grpc_ports = {int(a.rsplit(":", 1)[1]) for tasks in cluster.cluster.values() for a in tasks}
    control = [(t - changed, dscp) for t, s, d, dscp, _ in capture.packets if s in grpc_ports]
    assert {dscp for t, dscp in control if t < 0} <= {0, EF}, sorted({x for _, x in control})
    assert EF in {dscp for t, dscp in control if t < 0}, "no control packet carried class 0's marks"
    after = [dscp for t, dscp in control if t > REACH_S]
    assert after and set(after) == {AF31}, sorted(set(after))
    for name, rows in counters.items():
        assert all(c["errors"] == 0 for c in rows), (name, rows)
        # Re-marked in place: one connection per flow, its counters' DSCP the new class's.
        assert all(c["connections"] == 1 for c in rows), (name, rows)
        for c in rows:
            if c["peer_task"].startswith(("/job:ps", "/job:worker")):
                assert c["dscp"] == (AF31 if c["klass"] == 0 else AF21), (name, c)
        assert "open flows re-marked" in stderr[name], stderr[name][-2000:]


def packets_classified(
    capture: LoopbackCapture,
    ps_port: int,
    worker_ports: set[int],
    ps_consumers: set[int],
    worker_consumers: set[int],
) -> bool:
    """Both ends of the data plane's flows were seen on the wire (the capture ran and the ports are right)."""
    assert capture.packets is not None
    flows = {(s, d) for _, s, d, _, _ in capture.packets}
    return any(s == ps_port and d in worker_consumers for s, d in flows) and any(
        s in worker_ports and d in ps_consumers for s, d in flows
    )
