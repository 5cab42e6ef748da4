"""Replaced map_table versions are freed while lookups and receives run (issue 16, item 8).

The threshold search installs a version per step; retired versions used to be kept forever. Now an
install frees the version it replaced once no reader can hold it (classes.cc: pins and a grace wait).
One process runs a PS and a worker server (grpc+geryon) and, at once: a TF1 session pulling a
variable through the data plane step after step (each receive looks its edge up twice), a thread of
native lookups in a tight C++ loop (ctypes releases the GIL), and thousands of installs through the
real op `GeryonSetMapTable`. After each install the live snapshot count (the built-in table and the
current one) and the class that version gives are read back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("native_built")]
TESTS_TF = str(Path(__file__).parent)
INSTALLS = 3000


SCRIPT = r"""
import json, os, sys, threading
sys.path.insert(0, os.environ["TESTS_TF"])
from tf_cluster import DATA_OFFSET, pick_ports
import tensorflow as tf
import geryon.tf
from geryon.tf.strategy import native_ops

INSTALLS = int(os.environ["INSTALLS"])
v1 = tf.compat.v1
ps_port, worker_port = pick_ports(2)
spec = tf.train.ClusterSpec({"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"]})
servers = [geryon.tf.server(spec, job, 0, data_port_offset=DATA_OFFSET) for job in ("ps", "worker")]
cdll = geryon.tf.load().cdll
ops = native_ops()
graph = tf.Graph()
with graph.as_default():
    with v1.device("/job:ps/task:0"):
        v = v1.get_variable("v", [1000], use_resource=True, initializer=v1.ones_initializer())
    with v1.device("/job:worker/task:0"):
        total = tf.reduce_sum(tf.identity(v) * 2.0)
    init = v1.global_variables_initializer()
# The installs run through the op in a local session of their own (graph mode, as TF1 jobs install).
install_graph = tf.Graph()
with install_graph.as_default():
    text = v1.placeholder(tf.string, [])
    set_table, read_table = ops.geryon_set_map_table(text), ops.geryon_map_table()[0]
installer = v1.Session(graph=install_graph)

def table(version):
    # Parameter 0 alternates between the classes, so each version's lookups tell versions apart.
    first = version % 2
    return (f"geryon.map_table.native 2\nversion {version}\nclasses 2\ndefault 1\nparams 2\n"
            f"0 {first} 0 a\n1 {1 - first} 1 b\nbindings 0\nend\n")

stop = threading.Event()
steps, lookups, errors = [], [0], []
def train(sess):
    while not stop.is_set() and len(steps) < 100000:
        try:
            steps.append(float(sess.run(total)))
        except Exception as e:  # reported, not raised in a thread
            errors.append(repr(e)[:500]); return
def look():
    while not stop.is_set() and lookups[0] < 100000:
        cdll.geryon_bench_class_lookup_ns(b"edge_3_x#gp=0", 20000); lookups[0] += 1

base = int(installer.run(read_table))
out = {"live_before": cdll.geryon_map_table_live_snapshots()}
live, wrong = [], []
with v1.Session(servers[1].target, graph=graph) as sess:
    sess.run(init)
    threads = [threading.Thread(target=train, args=(sess,)), threading.Thread(target=look)]
    for t in threads: t.start()
    for i in range(1, INSTALLS + 1):
        version = base + i
        got = int(installer.run(set_table, {text: table(version)}))
        live.append(cdll.geryon_map_table_live_snapshots())
        cls = [cdll.geryon_class_for_edge(b"edge_3_x#gp=0"), cdll.geryon_class_for_edge(b"edge_3_x#gp=1")]
        if got != version or cls != [version % 2, 1 - version % 2]:
            wrong.append([version, got, cls])
    stop.set()
    for t in threads: t.join(timeout=60)
out.update(live_max=max(live), live_last=live[-1], wrong=wrong[:5], steps=len(steps),
           step_values=sorted(set(steps)), lookups=lookups[0], errors=errors,
           version=int(installer.run(read_table)), base=base)
print(json.dumps(out), flush=True)
os._exit(0)
"""


def _run() -> dict[str, Any]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TESTS_TF": TESTS_TF, "INSTALLS": str(INSTALLS)}
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, result.stderr[-4000:]
    facts: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return facts


def test_thousands_of_installs_under_receives_keep_two_live_snapshots_and_the_right_classes() -> None:
    facts = _run()
    assert facts["errors"] == [], facts
    assert facts["wrong"] == [], facts  # every version gave its own classes back
    assert facts["version"] == facts["base"] + INSTALLS
    # At rest: the built-in table (kept for the process) and the current one. Each install freed the
    # version it replaced before returning; without that this count was INSTALLS + 1.
    assert facts["live_before"] <= 2
    assert facts["live_max"] == 2 and facts["live_last"] == 2, facts
    # The receives and lookups really ran beside the installs, and every step read the right tensor.
    assert facts["steps"] >= 5 and facts["lookups"] >= 5, facts
    assert facts["step_values"] == [2000.0], facts
