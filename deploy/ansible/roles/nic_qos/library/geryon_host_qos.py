#!/usr/bin/python
"""Ansible module: make a host's QoS match a Geryon agent config through `geryon agent plan|apply`."""

# ruff: noqa: E402  (Ansible modules keep DOCUMENTATION above the imports)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: geryon_host_qos
short_description: Host and NIC QoS through the Geryon agent's plan and apply
description:
  - Runs C(geryon agent plan --json); when it lists changes, runs C(geryon agent apply) (all or nothing,
    rolled back on failure). In check mode only the plan runs, and its changes are the diff.
  - Idempotent: a host already as configured reports no change and applies nothing.
options:
  geryon:
    description: The geryon command (path or name in PATH).
    type: str
    default: geryon
  config:
    description: The agent config file on the host.
    type: path
    required: true
  journal:
    description: The agent journal (the pre-Geryon values C(geryon agent restore) brings back).
    type: path
    default: /var/lib/geryon/journal.json
  netns:
    description: Act inside this network namespace (C(ip netns) name); empty for the host's own.
    type: str
    default: ""
  root:
    description: Root of sysfs/configfs for RoCE ToS/ECN (tests point it at a tree).
    type: path
    default: /
author: Geryon
"""

RETURN = r"""
plan:
  description: The plan as C(geryon agent plan) prints it.
  returned: always
  type: str
changes:
  description: The targets that were (or, in check mode, would be) changed.
  returned: always
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule


def _argv(p, action):
    argv = [
        p["geryon"],
        "agent",
        action,
        "--config",
        p["config"],
        "--journal",
        p["journal"],
        "--root",
        p["root"],
    ]
    if p["netns"]:
        argv += ["--netns", p["netns"]]
    return argv


def _text(value):
    return json.dumps(value, indent=1, sort_keys=True) + "\n" if value is not None else "(kernel default)\n"


def _plan_text(plan):
    lines = []
    for c in plan["changes"]:
        lines.append(f"~ {c['target']} ({c['driver']})")
    for s in plan["skipped"]:
        lines.append(f"! skipped {s['target']} ({s['driver']}): {s['reason']}")
    lines.append(
        f"{len(plan['changes'])} change(s), {len(plan['in_sync'])} in sync, {len(plan['skipped'])} skipped"
    )
    return "\n".join(lines)


def main():
    module = AnsibleModule(
        argument_spec={
            "geryon": {"type": "str", "default": "geryon"},
            "config": {"type": "path", "required": True},
            "journal": {"type": "path", "default": "/var/lib/geryon/journal.json"},
            "netns": {"type": "str", "default": ""},
            "root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode and not os.path.exists(p["config"]):
        # Check mode on a fresh host: geryon_agent has not written the config (it only showed its diff).
        module.exit_json(
            changed=False,
            skipped=True,
            changes=[],
            plan="",
            msg=f"{p['config']} is not on the host yet (geryon_agent writes it on a real run): no plan",
        )
    rc, out, err = module.run_command([*_argv(p, "plan"), "--json"])
    if rc != 0:
        module.fail_json(msg=f"geryon agent plan failed (exit {rc}): {err.strip() or out.strip()}", rc=rc)
    try:
        plan = json.loads(out)
    except ValueError:
        module.fail_json(msg=f"geryon agent plan --json printed no JSON: {out[:200]!r}")
    changes = [c["target"] for c in plan["changes"]]
    result = {"changed": bool(changes), "changes": changes, "plan": _plan_text(plan)}
    if changes and module._diff:
        result["diff"] = [
            {
                "before_header": f"{c['target']} (now)",
                "after_header": f"{c['target']} (as configured)",
                "before": _text(c["before"]),
                "after": _text(c["after"]),
            }
            for c in plan["changes"]
        ]
    if changes and not module.check_mode:
        rc, out, err = module.run_command([*_argv(p, "apply"), "--quiet"])
        if rc != 0:
            module.fail_json(
                msg=f"geryon agent apply failed (exit {rc}), rolled back: {err.strip()}", rc=rc, **result
            )
        result["plan"] = out.strip()
    module.exit_json(**result)


if __name__ == "__main__":
    main()
