"""Device tensors through `grpc+geryon`: pulls into and pushes from accelerator memory vs host memory.

    .venv/bin/python bench/bench_rendezvous.py --device [--repeats 9] [--out out/bench/rendezvous_device.json]

One `grpc+geryon` cluster on loopback (a PS and a worker process; the worker has the GERYONTEST
PluggableDevice, native/test_device: device memory that is host memory, copied through TF's
PluggableDevice DeviceContext like a GPU's). A TF1 client alternates, in every repeat, between the
host and the device variant of each row, so both see the same machine load. Rows:
  pull 16 MB      the worker receives a 16 MB float32 variable from the PS into CPU memory (host)
                  or into GERYONTEST memory (device: staging buffer + host->device copy)
  push 16 MB      the PS receives 16 MB from a variable in the worker's CPU memory (host) or in its
                  GERYONTEST memory (device: device->host copy into a staging buffer, then the write)
  pull/push 200 x 4 B   200 tiny tensors in one step: step time / 200 = cost per tensor
Reported: medians, MB/s for 16 MB, extra ms per step and extra us per tiny tensor of device over host,
and the median of the per-repeat paired ratios device/host with its min..max. On a real GPU the
copies run on DMA engines over PCIe (about 25 GB/s on PCIe 4 x16); here they are memcpy on the same
cores, so the extra time is an upper bound on the data plane's own overhead plus a host memcpy.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import child_env, child_servers, print_table, run_client, write_json

from geryon.progress import Progress
from geryon.tf.build import build, build_test_device
from geryon.tf.ports import free_port_pairs

DATA_OFFSET = -7000
MB = 16
SMALL = 200
VARIANTS = ("host", "device")

_SERVER = r"""
import json, os, time
import tensorflow as tf
spec = json.loads(os.environ["BENCH_SPEC"])
if spec["job"] == "worker":  # only the worker has the device: the PS's tensors stay in its CPU memory
    from geryon.tf import test_device
    test_device.load()
import geryon.tf
server = geryon.tf.server(tf.train.ClusterSpec(spec["cluster"]), spec["job"], 0)
print("READY", flush=True)
while True:
    time.sleep(1)
"""

# Each row's fetch is a CPU constant with a control dependency on the transfers, so the device
# variant measures the receive into device memory and nothing after it (no copy back to the host).
_CLIENT = r"""
import json, os, sys, time
import tensorflow as tf
spec = json.loads(os.environ["BENCH_SPEC"])
tf.compat.v1.disable_eager_execution()
n = spec["mb"] * 262144
small = spec["small"]
places = {"host": "/job:worker/task:0/device:CPU:0", "device": "/job:worker/task:0/device:GERYONTEST:0"}
fetches = {}
ps_cpu, worker_cpu = "/job:ps/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:0"
with tf.device(ps_cpu):
    ps_big = tf.Variable(tf.ones([n]), name="ps_big")
    ps_small = [tf.Variable(tf.ones([1]), name=f"ps_s{i}") for i in range(small)]
    sink_big = {v: tf.Variable(tf.zeros([n]), name=f"sink_{v}") for v in places}
    sink_small = {v: [tf.Variable(tf.zeros([1]), name=f"sink_{v}_{i}") for i in range(small)] for v in places}
with tf.device(worker_cpu):  # initial values: GERYONTEST has no Fill kernel
    ones_big, ones_small = tf.ones([n]), tf.ones([1])
for variant, place in places.items():
    with tf.device(place):
        local_big = tf.Variable(ones_big, name=f"local_{variant}")
        local_small = [tf.Variable(ones_small, name=f"local_{variant}_{i}") for i in range(small)]
        pulled_big = tf.identity(ps_big)
        pulled_small = [tf.identity(v) for v in ps_small]
        read_big = local_big.read_value()
        read_small = [v.read_value() for v in local_small]
    with tf.device(ps_cpu):
        pushed_big = sink_big[variant].assign(read_big, read_value=False)
        pushed_small = tf.group(
            *[s.assign(r, read_value=False) for s, r in zip(sink_small[variant], read_small)])
    with tf.device(worker_cpu):
        for name, deps in ((f"pull {spec['mb']} MB", [pulled_big]), (f"pull {small} x 4 B", pulled_small),
                           (f"push {spec['mb']} MB", [pushed_big]), (f"push {small} x 4 B", [pushed_small])):
            with tf.control_dependencies(deps):
                fetches.setdefault(name, {})[variant] = tf.constant(0.0)
config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:0"])
sess = tf.compat.v1.Session("grpc://" + spec["worker"], config=config)
sess.run(tf.compat.v1.global_variables_initializer())
for row in fetches.values():
    for f in row.values():
        sess.run(f)  # warm-up: connections, graph registration, staging pools
samples = {name: {v: [] for v in places} for name in fetches}
for name, row in fetches.items():
    for _ in range(spec["repeats"]):
        for variant in places:  # alternate: same load for both
            start = time.perf_counter()
            sess.run(row[variant])
            samples[name][variant].append(time.perf_counter() - start)
    print(f"bench: {name} done", file=sys.stderr, flush=True)
print("RESULT " + json.dumps(samples), flush=True)
os._exit(0)
"""


def measure(repeats: int, progress: Progress) -> dict[str, dict[str, list[float]]]:
    offset = {"GERYON_DATA_PORT_OFFSET": str(DATA_OFFSET)}
    ps_port, worker_port = free_port_pairs(2, DATA_OFFSET)
    cluster = {"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"]}
    envs = [child_env({"cluster": cluster, "job": job}, **offset) for job in ("ps", "worker")]
    with child_servers(_SERVER, envs) as servers:
        progress.say("PS and worker (with GERYONTEST) up; measuring host and device variants alternately")
        spec = {"worker": cluster["worker"][0], "mb": MB, "small": SMALL, "repeats": repeats}
        result: dict[str, dict[str, list[float]]] = run_client(
            _CLIENT, child_env(spec, **offset), servers=servers
        )
        return result


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def summarize(samples: dict[str, dict[str, list[float]]]) -> list[dict[str, Any]]:
    rows = []
    for name, by_variant in samples.items():
        host, device = by_variant["host"], by_variant["device"]
        ratios = [d / h for h, d in zip(host, device, strict=True)]  # paired: the same repeat
        row: dict[str, Any] = {
            "what": name,
            "host_ms": _median(host) * 1e3,
            "device_ms": _median(device) * 1e3,
            "ratio": _median(ratios),
            "ratio_min": min(ratios),
            "ratio_max": max(ratios),
        }
        row["extra_ms"] = row["device_ms"] - row["host_ms"]
        if "MB" in name:
            row["host_mbps"] = MB / _median(host)
            row["device_mbps"] = MB / _median(device)
        else:
            row["extra_us_per_tensor"] = row["extra_ms"] * 1e3 / SMALL
        rows.append(row)
    return rows


def run(repeats: int, out: str) -> int:
    progress = Progress("bench_rendezvous --device")
    build(progress=progress)
    build_test_device(progress=progress)
    samples = measure(repeats, progress)
    rows = summarize(samples)
    print_table(
        rows,
        [("what", "what", "s"), ("host_ms", "host ms", ".2f"), ("device_ms", "device ms", ".2f"),
         ("host_mbps", "host MB/s", ".0f"), ("device_mbps", "device MB/s", ".0f"),
         ("extra_ms", "extra ms", ".2f"), ("extra_us_per_tensor", "extra us/tensor", ".1f"),
         ("ratio", "device/host", ".2f"), ("ratio_min", "min", ".2f"), ("ratio_max", "max", ".2f")],
    )  # fmt: skip
    print(f"medians of {repeats} alternating repeats per variant; ratio: median of paired per-repeat ratios")
    write_json(out, {"rows": rows, "repeats": repeats, "samples_s": samples, "device": "GERYONTEST"})
    return 0
