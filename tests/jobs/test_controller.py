"""Controllers as processes (`geryon controller`) against a real etcd: one leads, a standby takes over
within 5 s of the leader's SIGKILL with every job on one consistent generation; a chief that dies frees
its band within its lease; intensities change bands live; bad registrations are refused."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobs.etcd_server import EtcdCluster, geryon, kill, start_cluster
from waiting import wait_until

from geryon.jobs import etcd, keys
from geryon.jobs.chief import HostRegistration, JobRegistration
from geryon.jobs.registration import Intensity, JobRecord, RegistrationError, make_record

P = keys.DEFAULT_PREFIX


@pytest.fixture
def server() -> Iterator[EtcdCluster]:
    cluster = start_cluster(1)
    yield cluster
    cluster.stop()


@pytest.fixture
def client(server: EtcdCluster) -> etcd.Client:
    return etcd.Client(server.endpoints)


@pytest.fixture
def hosts(client: etcd.Client) -> Iterator[None]:
    regs = [HostRegistration(client, h).register() for h in ("h1", "h2")]
    yield
    for r in regs:
        r.close()


def controller(server: EtcdCluster, name: str, tmp: Path) -> subprocess.Popen[bytes]:
    args = ["controller", "--etcd", ",".join(server.endpoints), "--queues", "4", "--name", name]
    return geryon(*args, "--ttl", "2", "--interval", "0.2", log=str(tmp / f"{name}.log"))


def bands(client: etcd.Client) -> dict:
    kv = client.get(keys.bands_all(P))
    return json.loads(kv.value) if kv else {}


def job_classes(client: etcd.Client) -> dict[str, list[int]]:
    return {j: v["classes"] for j, v in bands(client).get("jobs", {}).items()}


def consistent(client: etcd.Client) -> int:
    """One snapshot of the whole prefix: every host key has bands/all's generation and its bands."""
    kvs, _ = client.range(P, prefix=True)
    by_key = {kv.key: json.loads(kv.value) for kv in kvs if kv.key.startswith(P + "bands/")}
    whole = by_key.get(keys.bands_all(P))
    if whole is None:
        return 0
    for key, value in by_key.items():
        if key.startswith(keys.hosts(P)):
            assert value["generation"] == whole["generation"], (key, value, whole["generation"])
            for job, cls in value["jobs"].items():
                assert whole["jobs"][job]["classes"] == cls
    expected_hosts = {h for v in whole["jobs"].values() for h in v["hosts"]}
    assert {k[len(keys.hosts(P)) :] for k in by_key if k.startswith(keys.hosts(P))} == expected_hosts
    return int(whole["generation"])


def record(job: str, port: int, compute: float, host: str = "h1") -> JobRecord:
    return make_record(job, {"worker:0": f"{host}:{port}", "ps:0": f"h2:{port}"}, compute, 0.2, 1000)


def test_leader_killed_standby_takes_over_with_consistent_bands(
    server: EtcdCluster, client: etcd.Client, hosts: None, tmp_path: Path
) -> None:
    procs = {n: controller(server, n, tmp_path) for n in ("c1", "c2")}
    heavy = JobRegistration(client, record("heavy", 2222, 0.18)).register()
    light = JobRegistration(client, record("light", 2223, 0.06)).register()
    errors: list[BaseException] = []
    stop = threading.Event()

    def check() -> None:  # the invariant, every 50 ms, all along (the kill included)
        while not stop.is_set():
            try:
                consistent(client)
            except BaseException as e:
                errors.append(e)
                return
            time.sleep(0.05)

    checker = threading.Thread(target=check, daemon=True)
    checker.start()
    try:
        wait_until("bands of both jobs", lambda: job_classes(client), lambda b: len(b) == 2, timeout=10)
        assert job_classes(client) == {"heavy": [0, 2], "light": [1, 3]}
        assert heavy.wait_verdict(timeout=1)["classes"] == [0, 2]
        leader = client.get(keys.leader(P)).value.decode()  # type: ignore[union-attr]
        standby = "c2" if leader == "c1" else "c1"
        generation = bands(client)["generation"]
        # SIGKILL the leader, then change the ranking at once: only the standby can write it
        killed_at = time.monotonic()
        kill(procs[leader])
        light.update(Intensity(0.19, 0.2, 1000))
        wait_until(
            "the standby's bands", lambda: job_classes(client), lambda b: b.get("light") == [0, 2], timeout=8
        )
        takeover = time.monotonic() - killed_at
        print(f"takeover: {takeover:.2f} s")
        assert takeover <= 5.0
        assert client.get(keys.leader(P)).value.decode() == standby  # type: ignore[union-attr]
        assert bands(client)["controller"] == standby and bands(client)["generation"] == generation + 1
        assert job_classes(client) == {"heavy": [1, 3], "light": [0, 2]}
    finally:
        stop.set()
        checker.join(timeout=5)
        heavy.close()
        light.close()
        for p in procs.values():
            kill(p)
    assert errors == []
    assert consistent(client) >= 2


def test_dead_chief_frees_its_band_within_its_lease(
    server: EtcdCluster, client: etcd.Client, hosts: None, tmp_path: Path
) -> None:
    ctl = controller(server, "c1", tmp_path)
    rec_file = tmp_path / "job.json"
    rec_file.write_text(record("doomed", 2230, 0.1).dumps())
    chief = geryon(
        "jobs",
        "register",
        "--etcd",
        server.endpoints[0],
        "--ttl",
        "3",
        str(rec_file),
        log=str(tmp_path / "chief.log"),
    )
    try:
        with JobRegistration(client, record("stays", 2231, 0.05)) as stays:
            wait_until(
                "the doomed job's band", lambda: job_classes(client), lambda b: "doomed" in b, timeout=10
            )
            assert job_classes(client) == {"doomed": [0, 2], "stays": [1, 3]}
            killed_at = time.monotonic()
            kill(chief)  # SIGKILL: no revoke, the lease runs out
            wait_until("the band freed", lambda: job_classes(client), lambda b: "doomed" not in b, timeout=8)
            freed = time.monotonic() - killed_at
            print(f"dead chief's band freed after {freed:.2f} s (lease 3 s)")
            assert freed <= 5.0
            assert job_classes(client) == {"stays": [0, 1]}  # alone: today's classes
            assert stays.verdict() == {"classes": [0, 1], "generation": bands(client)["generation"]}
            # a chief that leaves cleanly (revoke) frees it at once
            gone = JobRegistration(client, record("brief", 2232, 0.2)).register()
            wait_until("brief's band", lambda: job_classes(client), lambda b: "brief" in b, timeout=5)
            left_at = time.monotonic()
            gone.close()
            wait_until(
                "brief's band freed", lambda: job_classes(client), lambda b: "brief" not in b, timeout=5
            )
            assert time.monotonic() - left_at < 1.5
    finally:
        kill(chief)
        kill(ctl, signal.SIGTERM)
    assert "registered (lease" in (tmp_path / "chief.log").read_text()


def test_bad_registrations_are_refused_with_the_reason(
    server: EtcdCluster, client: etcd.Client, hosts: None, tmp_path: Path
) -> None:
    ctl = controller(server, "c1", tmp_path)
    try:
        with JobRegistration(client, record("owner", 2240, 0.1)) as owner:
            assert owner.wait_verdict(timeout=10)["classes"] == [0, 1]
            with pytest.raises(RegistrationError, match="'owner' is already registered"):
                JobRegistration(client, record("owner", 2299, 0.1)).register()
            stray = JobRegistration(client, record("stray", 2241, 0.1, host="h7")).register()
            with pytest.raises(RegistrationError, match="host 'h7' is unknown"):
                stray.wait_verdict(timeout=5)
            stray.close()
            thief_rec = make_record("thief", {"worker:0": "h1:2240"}, 0.2, 0.2, 0)
            with JobRegistration(client, thief_rec) as thief:
                with pytest.raises(RegistrationError, match="h1:2240 is job 'owner''s worker:0"):
                    thief.wait_verdict(timeout=5)
                assert job_classes(client) == {"owner": [0, 1]}
            wait_until("refusals cleared", lambda: bands(client).get("refused"), lambda r: r == {}, timeout=5)
            assert client.range(keys.refusals(P), prefix=True)[0] == []
        out = subprocess.run(
            [*geryon_list(server)], capture_output=True, text=True, timeout=30, check=True
        ).stdout
        assert "leader: c1" in out
    finally:
        kill(ctl, signal.SIGTERM)


def geryon_list(server: EtcdCluster) -> list[str]:
    return [sys.executable, "-m", "geryon", "jobs", "list", "--etcd", server.endpoints[0]]


def test_a_controller_stopped_cleanly_hands_over_at_once(
    server: EtcdCluster, client: etcd.Client, hosts: None, tmp_path: Path
) -> None:
    first = controller(server, "c1", tmp_path)
    wait_until("c1 leading", lambda: client.get(keys.leader(P)), lambda kv: kv is not None, timeout=10)
    second = controller(server, "c2", tmp_path)
    try:
        time.sleep(1)
        assert client.get(keys.leader(P)).value == b"c1"  # type: ignore[union-attr]
        stopped_at = time.monotonic()
        kill(first, signal.SIGTERM)  # resigns: revokes its lease
        wait_until(
            "c2 leading",
            lambda: client.get(keys.leader(P)),
            lambda kv: kv is not None and kv.value == b"c2",
            timeout=5,
        )
        assert time.monotonic() - stopped_at < 2.0
    finally:
        kill(first)
        kill(second)
    assert "leader (lease" in (tmp_path / "c2.log").read_text()


def test_jobs_of_nearly_equal_intensity_keep_their_bands_until_one_leads_by_the_margin(
    server: EtcdCluster, client: etcd.Client, hosts: None, tmp_path: Path
) -> None:
    # The controller's default hysteresis (5%): b measuring 2% above a moves nothing; 10% above does.
    ctl = controller(server, "c1", tmp_path)
    try:
        with JobRegistration(client, record("a", 2250, 0.100)) as a:
            assert a.wait_verdict(timeout=10)["classes"] == [0, 1]
            with JobRegistration(client, record("b", 2251, 0.098)) as b:
                wait_until("two bands", lambda: job_classes(client), lambda c: len(c) == 2, timeout=10)
                assert job_classes(client) == {"a": [0, 2], "b": [1, 3]}
                generation = bands(client)["generation"]
                b.update(Intensity(0.102, 0.2, 1000))  # 0.51 against a's 0.50
                time.sleep(1.5)  # several rounds of the controller (0.2 s each)
                assert job_classes(client) == {"a": [0, 2], "b": [1, 3]}
                assert bands(client)["generation"] == generation  # nothing written
                b.update(Intensity(0.110, 0.2, 1000))  # 0.55: 10% above
                wait_until(
                    "b passes a", lambda: job_classes(client), lambda c: c.get("b") == [0, 2], timeout=5
                )
                assert job_classes(client) == {"a": [1, 3], "b": [0, 2]}
    finally:
        kill(ctl, signal.SIGTERM)


def test_a_chiefs_meter_moves_its_job_up_as_its_steps_get_faster(
    server: EtcdCluster, client: etcd.Client, hosts: None, tmp_path: Path
) -> None:
    # The chief's side end to end: step times into IntensityMeter, its updates into etcd, the
    # controller's bands out.
    from geryon.jobs.meter import IntensityMeter

    ctl = controller(server, "c1", tmp_path)
    try:
        with (
            JobRegistration(client, record("a", 2260, 0.100)) as a,  # 0.5
            JobRegistration(client, record("b", 2261, 0.060)) as b,  # 0.3
        ):
            wait_until("two bands", lambda: job_classes(client), lambda c: len(c) == 2, timeout=10)
            assert job_classes(client) == {"a": [0, 2], "b": [1, 3]}
            meter = IntensityMeter(
                b, compute_s=0.06, bytes_per_iteration=1000, window=4, registered=b.record.intensity
            )
            wrote = [meter.step(0.08) for _ in range(4)]  # b's steps got faster: 0.06 / 0.08 = 0.75
            assert wrote[-1] == Intensity(0.06, 0.08, 1000)
            wait_until("b passes a", lambda: job_classes(client), lambda c: c.get("b") == [0, 2], timeout=5)
            assert a.wait_verdict(timeout=1)["classes"] == [1, 3]
    finally:
        kill(ctl, signal.SIGTERM)
