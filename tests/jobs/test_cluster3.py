"""A 3-member etcd cluster: one member killed (SIGKILL) changes nothing: reads and writes go on through
the others, the controller keeps leading and answers a new job, a host's watcher stays live."""

from __future__ import annotations

import json
import time
from pathlib import Path

from jobs.etcd_server import geryon, kill, start_cluster
from waiting import wait_until

from geryon.jobs import etcd, keys
from geryon.jobs.chief import HostRegistration, JobRegistration
from geryon.jobs.registration import make_record
from geryon.jobs.watch import BandWatcher

P = keys.DEFAULT_PREFIX


def test_one_member_killed_changes_nothing(tmp_path: Path) -> None:
    cluster = start_cluster(3)
    ctl = None
    try:
        # 2 s: a request waits out the raft election when the killed member led (1 s quiet; a 1 s
        # client timeout ran out on both survivors beside three test workers, 2026-12-02).
        client = etcd.Client(cluster.endpoints, timeout=2)
        host = HostRegistration(client, "h1").register()
        ctl = geryon(
            "controller", "--etcd", ",".join(cluster.endpoints), "--queues", "4", "--name", "c1",
            "--ttl", "2", "--interval", "0.2", log=str(tmp_path / "c1.log"),
        )  # fmt: skip
        a = JobRegistration(client, make_record("a", {"worker:0": "h1:2222"}, 0.1, 0.2, 0)).register()
        assert a.wait_verdict(timeout=10)["classes"] == [0, 1]
        watcher = BandWatcher(etcd.Client(cluster.endpoints, timeout=1), "h1").start()
        wait_until("the watcher's band", lambda: watcher.band("a"), lambda b: b == {0: 0, 1: 1}, timeout=5)

        # kill the member every client tries first (the controller's, the job's, the watcher's)
        victim = cluster.members[0]
        victim.kill()
        killed = time.monotonic()
        client.put("/t/after", "written")
        assert client.get("/t/after").value == b"written"  # type: ignore[union-attr]
        b = JobRegistration(client, make_record("b", {"worker:0": "h1:2223"}, 0.19, 0.2, 0)).register()
        verdict = b.wait_verdict(timeout=8)
        answered = time.monotonic() - killed
        print(f"3 members, one killed: new job answered after {answered:.2f} s")
        assert verdict["classes"] == [0, 2] and answered <= 5.0
        wait_until(
            "the watcher's new band", lambda: watcher.band("a"), lambda b: b == {0: 1, 1: 3}, timeout=5
        )
        assert watcher.status().live
        leader = client.get(keys.leader(P))
        assert leader is not None and leader.value == b"c1"
        assert json.loads(client.get(keys.bands_all(P)).value)["controller"] == "c1"  # type: ignore[union-attr]
        assert ctl.poll() is None
        # and a's lease (kept alive through the survivors) still holds past its ttl
        time.sleep(3.5)
        assert set(json.loads(client.get(keys.bands_all(P)).value)["jobs"]) == {"a", "b"}  # type: ignore[union-attr]
        watcher.stop()
        a.close()
        b.close()
        host.close()
    finally:
        if ctl is not None:
            kill(ctl)
        cluster.stop()
