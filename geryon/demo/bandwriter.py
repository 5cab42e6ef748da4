"""Writes generations of bands into etcd as the controller would: `python -m geryon.demo.bandwriter URL`.

geryon.demo.twojobs starts it beside etcd in a testbed host (URL: etcd's loopback endpoint there; the
bench's own process is outside the testbed's namespaces). It prints "ready" once etcd answers, then
reads one JSON object a line, {host: {"generation", "queues", "jobs": {job: [fabric classes]}}}, and
writes every bands/hosts/<host> of it in one transaction, printing "ok" (or "error: ..."). It ends at
the end of its input.
"""

from __future__ import annotations

import json
import sys
import time

from geryon.jobs import etcd, keys

START_S = 30.0


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m geryon.demo.bandwriter ETCD_URL", file=sys.stderr)
        return 2
    client = etcd.Client(argv[0])
    deadline = time.monotonic() + START_S
    while True:
        try:
            client.status()
            break
        except etcd.EtcdError as e:
            if time.monotonic() > deadline:
                print(f"error: etcd did not answer within {START_S:.0f} s: {e}", flush=True)
                return 1
            time.sleep(0.2)
    print("ready", flush=True)
    prefix = keys.DEFAULT_PREFIX
    for line in sys.stdin:
        try:
            values = json.loads(line)
            ops = [etcd.op_put(keys.host(prefix, host), json.dumps(value)) for host, value in values.items()]
            client.txn([], ops)
        except (ValueError, AttributeError, etcd.EtcdError) as e:
            print(f"error: {e}", flush=True)
            continue
        print("ok", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
