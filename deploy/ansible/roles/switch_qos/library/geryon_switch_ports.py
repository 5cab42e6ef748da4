#!/usr/bin/python
"""Ansible module: the Linux software switch's port queues from a Geryon intent, idempotently."""

# ruff: noqa: E402  (Ansible modules keep DOCUMENTATION above the imports)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: geryon_switch_ports
short_description: Linux software-switch port queues (HTB strict priority) from a Geryon QoS intent
description:
  - Renders the intent's port trees and reads the ports' queues back from the kernel (inside C(netns)).
    Ports already as rendered are left alone; otherwise it runs
    C(geryon render-switch --os linux --apply), which writes every port and reads it back.
  - In check mode nothing is written; the differing ports are the diff.
options:
  geryon:
    description: The geryon command on the switch host.
    type: str
    default: geryon
  python:
    description: A Python that imports geryon (to read the ports' queues back).
    type: str
    default: python3
  intent:
    description: The intent (YAML text, as in the intent file on the controller).
    type: str
    required: true
  ports:
    description: Switch egress ports (interface names).
    type: list
    elements: str
    required: true
  netns:
    description: The switch's network namespace; empty for the host's own.
    type: str
    default: ""
  rate:
    description: Link rate of every port (e.g. 100mbit).
    type: str
    required: true
  buffer:
    description: Queue buffer per class (e.g. 256kib).
    type: str
    required: true
author: Geryon
"""

RETURN = r"""
changed_ports:
  description: Ports whose queues differed from the intent (and were rewritten unless in check mode).
  returned: always
  type: list
  elements: str
"""

import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

# Runs in the switch host's geryon Python: {port: {before, after}} for every port not as rendered.
_OBSERVE = """
import json, sys
from geryon.agent.config import parse_rate, parse_size
from geryon.fabric.intent import load_intent
from geryon.fabric.render.linux import observe_ports, port_trees
a = json.loads(sys.argv[1])
trees = port_trees(load_intent(a["intent"]), a["ports"], parse_rate(a["rate"], "rate"),
                   parse_size(a["buffer"], "buffer"))
have = observe_ports(list(trees), a["netns"] or None)
print(json.dumps({p: {"before": have[p], "after": t} for p, t in trees.items() if have[p] != t}))
"""


def _differing(module, p):
    args = json.dumps({k: p[k] for k in ("intent", "ports", "netns", "rate", "buffer")})
    rc, out, err = module.run_command([p["python"], "-c", _OBSERVE, args])
    if rc != 0:
        module.fail_json(msg=f"reading the switch ports failed: {err.strip().splitlines()[-1:]}", rc=rc)
    return json.loads(out)


def main():
    module = AnsibleModule(
        argument_spec={
            "geryon": {"type": "str", "default": "geryon"},
            "python": {"type": "str", "default": "python3"},
            "intent": {"type": "str", "required": True},
            "ports": {"type": "list", "elements": "str", "required": True},
            "netns": {"type": "str", "default": ""},
            "rate": {"type": "str", "required": True},
            "buffer": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    p = dict(module.params)
    # The intent travels as text (check mode copies nothing to the switch); the CLI reads a file.
    fd, path = tempfile.mkstemp(prefix="geryon-intent-", suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(p["intent"])
    p["intent"] = path
    module.add_cleanup_file(path)
    diff = _differing(module, p)
    result = {"changed": bool(diff), "changed_ports": sorted(diff)}
    if diff and module._diff:
        result["diff"] = [
            {
                "before_header": f"{port}/qdisc (now)",
                "after_header": f"{port}/qdisc (intent)",
                "before": json.dumps(d["before"], indent=1, sort_keys=True) + "\n",
                "after": json.dumps(d["after"], indent=1, sort_keys=True) + "\n",
            }
            for port, d in sorted(diff.items())
        ]
    if diff and not module.check_mode:
        argv = [
            p["geryon"],
            "render-switch",
            "--os",
            "linux",
            "--intent",
            p["intent"],
            "--apply",
            "--ports",
            ",".join(p["ports"]),
            "--rate",
            p["rate"],
            "--buffer",
            p["buffer"],
        ]
        if p["netns"]:
            argv += ["--netns", p["netns"]]
        rc, _out, err = module.run_command(argv)
        if rc != 0:
            module.fail_json(
                msg=f"geryon render-switch --apply failed (exit {rc}): {err.strip()}", rc=rc, **result
            )
        left = _differing(module, p)
        if left:
            module.fail_json(
                msg=f"ports still differ from the intent after apply: {', '.join(sorted(left))}", **result
            )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
