"""BandWatcher against a real etcd: it follows its host's key live; etcd killed -> it keeps the last bands
and says so; etcd back -> live again and the next change arrives."""

from __future__ import annotations

import json
import time

from jobs.etcd_server import start_cluster
from waiting import wait_until

from geryon.jobs import etcd, keys
from geryon.jobs.watch import BandWatcher

KEY = keys.host(keys.DEFAULT_PREFIX, "h1")


def put_bands(client: etcd.Client, generation: int, jobs: dict[str, list[int]]) -> None:
    client.put(KEY, json.dumps({"generation": generation, "queues": 4, "jobs": jobs}))


def test_follows_keeps_the_last_bands_while_etcd_is_away_and_recovers() -> None:
    cluster = start_cluster(1)
    lines: list[str] = []
    changes: list[int] = []
    try:
        client = etcd.Client(cluster.endpoints, timeout=1)
        watcher = BandWatcher(client, "h1", log=lines.append, on_change=lambda b, g: changes.append(g))
        assert watcher.band("a", classes=2) == {0: 0, 1: 1}  # nothing known yet: today's classes
        with watcher:
            put_bands(client, 1, {"a": [0, 2]})
            wait_until("generation 1", lambda: watcher.status().generation, lambda g: g == 1, timeout=5)
            assert watcher.band("a") == {0: 0, 1: 2} and watcher.status().live
            put_bands(client, 2, {"a": [1, 3], "b": [0, 2]})
            wait_until("generation 2", lambda: watcher.status().generation, lambda g: g == 2, timeout=5)
            assert watcher.bands() == {"a": {0: 1, 1: 3}, "b": {0: 0, 1: 2}}

            member = cluster.members[0]
            member.kill()
            killed = time.monotonic()
            status = wait_until("stale", watcher.status, lambda s: not s.live, timeout=8)
            print(f"etcd lost: noticed after {time.monotonic() - killed:.2f} s")
            assert (
                "etcd unreachable" in status.message
                and "keeping the last bands (generation 2)" in status.message
            )
            assert watcher.bands() == {"a": {0: 1, 1: 3}, "b": {0: 0, 1: 2}}
            assert any("stale" in line for line in lines)

            member.start()  # same data dir: the same store comes back
            cluster.wait_healthy()
            wait_until("live again", watcher.status, lambda s: s.live, timeout=10)
            put_bands(client, 3, {"a": [0, 2]})
            wait_until("generation 3", lambda: watcher.status().generation, lambda g: g == 3, timeout=5)
            assert watcher.bands() == {"a": {0: 0, 1: 2}}
            client.delete(KEY)  # no job on the host any more
            wait_until("no bands", watcher.bands, lambda b: b == {}, timeout=5)
        assert changes[:3] == [1, 2, 3]
    finally:
        cluster.stop()
