"""Test tiers: every test gets one marker for the heaviest thing it needs (tests/README.md).

The tier of a test module comes from TIERS below (one line a module, so moving or adding a file shows
in one place; tests/test_tiers.py checks that every name there exists), unless the module sets
`pytestmark` with a tier of its own. A module in neither is `unit`: pure Python, no TensorFlow
process, no root, no program outside the interpreter, well under a second a test. `make check`
runs the unit tier (less its slow modules); `make test` runs every tier.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

# tier -> what a test of it needs (the markers pyproject.toml declares).
NEEDS = {
    "unit": "nothing outside the Python process: pure logic, fast",
    "tf": "TensorFlow in or outside the process, or the native extension (built once, a minute or two)",
    "netns": "root: network namespaces, veth, bridges and kernel queues the test creates and removes",
    "external": "a program outside Python: a compiler, Prometheus, a browser, ansible, pip, a bench run",
    "sanitizer": "the native extension built under AddressSanitizer or ThreadSanitizer",
}

# Modules (paths under tests/, without .py) and their tier; a folder name stands for every module in it.
TIERS: dict[str, str] = {
    "cluster/test_models": "tf",
    "cluster/test_procs": "external",
    "tf/test_cpp_unit": "external",
    "threshold/test_profiler": "tf",
    "threshold/test_profiles": "tf",
    "agent/test_api": "tf",
    "agent/test_cli": "netns",
    "agent/test_config": "netns",
    "agent/test_cluster_view": "external",
    "agent/test_daemon": "netns",
    "agent/test_dcbnl": "netns",
    "agent/test_engine": "netns",
    "agent/test_ethtool": "netns",
    "agent/test_flows": "netns",
    "agent/test_linux_driver": "netns",
    "agent/test_metrics": "tf",
    "agent/test_peer": "netns",
    "agent/test_prometheus": "tf",
    "agent/test_proto_stubs": "external",
    "agent/test_status": "tf",
    "agent/test_status_page": "tf",
    "agent/test_unresolved": "tf",
    "agent/test_vlan": "netns",
    "bench/test_bench_bg_share": "external",
    "bench/test_bench_calibration": "tf",
    "bench/test_bench_fit_step": "tf",
    "bench/test_bench_incast": "netns",
    "bench/test_bench_plan_testbed": "external",
    "bench/test_bench_search": "external",
    "bench/test_bench_switch_priority": "netns",
    "bench/test_bench_tac": "tf",
    "bench/test_bench_tf_import": "external",
    "dashboard/test_grafana": "tf",
    "demo/test_chart": "external",
    "demo/test_demo_quick": "tf",
    "demo/test_fit_path": "tf",
    "demo/test_incastcal": "netns",
    "demo/test_local": "tf",
    "demo/test_predict": "tf",
    "demo/test_runner": "tf",
    "demo/test_secondjob": "netns",
    "demo/test_stepdecomp": "tf",
    "demo/test_jobmeter": "external",
    "demo/test_twojobs_testbed": "netns",
    "demo/test_variants_testbed": "netns",
    "deploy/test_agent_unit": "external",
    "deploy/test_ansible_lint": "external",
    "deploy/test_check_mode": "netns",
    "deploy/test_prometheus_rules": "tf",
    "deploy/test_rollout_testbed": "netns",
    "deploy/test_switch_apply": "external",
    "deploy/test_wheel_role": "tf",
    "fabric/test_cli_render": "netns",
    "jobs/test_cluster3": "external",
    "jobs/test_controller": "external",
    "jobs/test_etcd": "external",
    "jobs/test_etcd_tls": "external",
    "jobs/test_watch": "external",
    "fabric/test_render": "external",
    "fabric/test_render_cumulus": "external",
    "fabric/test_render_linux": "netns",
    "fabric/test_sonic_yang": "external",
    "tagger/test_cli": "tf",
    "tagger/test_partition": "tf",
    "tagger/test_tag_models": "tf",
    "tagger/test_tac_models": "tf",
    "tagger/test_tag_sharded": "tf",
    "tagger/test_tf_partitioner": "tf",
    "plan/test_cli": "external",
    "test_cli": "external",
    "testbed/test_cli": "netns",
    "testbed/test_counters": "netns",
    "testbed/test_procs": "netns",
    "testbed/test_pki": "external",
    "testbed/test_queues": "netns",
    "testbed/test_spec": "netns",
    "testbed/test_state": "netns",
    "testbed/test_testbed": "netns",
    "testbed/test_traffic": "netns",
    "testbed/test_userns": "netns",
    "tf/test_async_dial": "tf",
    "tf/test_band_follow": "tf",
    "tf/test_build": "tf",
    "tf/test_cancel": "tf",
    "tf/test_cluster_updates": "tf",
    "tf/test_connection_refusal": "tf",
    "tf/test_control_flow": "tf",
    "tf/test_dataplane": "tf",
    "tf/test_device_tensors": "tf",
    "tf/test_error_payloads": "tf",
    "tf/test_fallback_warning": "tf",
    "tf/test_fallback_window": "tf",
    "tf/test_faults": "tf",
    "tf/test_frame_reader": "tf",
    "tf/test_graph_pass": "tf",
    "tf/test_loop_writes": "tf",
    "tf/test_map_table_native": "tf",
    "tf/test_map_table_versions": "tf",
    "tf/test_order": "tf",
    "tf/test_producer_abort": "tf",
    "tf/test_request_batching": "sanitizer",
    "tf/test_sanitizers": "sanitizer",
    "tf/test_scale": "sanitizer",
    "tf/test_server": "tf",
    "tf/test_session_end": "tf",
    "tf/test_strategy": "tf",
    "tf/test_tf_ps_tests": "tf",
    "tf/test_threshold_change": "tf",
    "tf/test_transport": "sanitizer",
    "tf/test_unresolved_counts": "tf",
    "tf/test_wheel_install": "tf",
    "threshold/test_cli": "external",
    "threshold/test_cli_trace": "tf",
    "threshold/test_incluster": "tf",
    "threshold/test_search_log": "external",
    "threshold/test_transfer_order": "tf",
}


# Unit-tier modules that are pure but take seconds a test (simulator sweeps, fuzzing): `slow` too, so
# `make check` (-m "unit and not slow") stays under 3 minutes; `make test` runs them.
SLOW_UNITS = {
    "bench/test_bench_demo_shape",
    "threshold/test_calibration",
    "agent/test_jobs",
    "agent/test_journal",
    "fabric/test_cli_check",
}


def _module_key(module: Path) -> str:
    return module.resolve().relative_to(TESTS).with_suffix("").as_posix()


def tier_of(module: Path) -> str:
    rel = _module_key(module)
    for key in (rel, *(p.as_posix() for p in Path(rel).parents if p.as_posix() != ".")):
        if key in TIERS:
            return TIERS[key]
    return "unit"


# `make test` runs the suite on cores + 1 pytest-xdist workers (Makefile), `--dist loadscope`: each module
# runs whole on one worker, so a module fixture (a quick demo, a TF cluster) is set up once. (`--dist
# loadgroup` with xdist_group marks did not group anything under pytest 9: xdist 3.8 renames the test ids it
# schedules by through `item._nodeid`, which pytest 9 no longer reads; the quick demo ran on both workers,
# 2026-12-03.) Workers overlap on 2 cores because most of a TF test's time is its processes starting and
# waiting on each other. The longest modules go first, so that none of them starts last and holds up the end
# of the run: module totals with --durations on 2 workers (2026-12-03, a fresh clone, 26 min in all),
# longest first; the rest keep their order.
LONGEST_FIRST = (
    "tf/test_sanitizers",  # the ASAN and TSAN runs, 100-200 s each (and their builds, when not cached)
    "demo/test_demo_quick",  # a quick demo, ~110 s
    "tf/test_build",  # a clean build of the extension, ~120 s
    "tf/test_control_flow",
    "tf/test_faults",
    "bench/test_bench_calibration",
    "tf/test_graph_pass",
    "demo/test_runner",
    "tf/test_order",
    "demo/test_secondjob",
    "tf/test_tf_ps_tests",
    "tf/test_server",
    "tagger/test_cli",
    "tf/test_threshold_change",
    "deploy/test_switch_apply",
    "tf/test_device_tensors",
    "bench/test_bench_switch_priority",
    "deploy/test_check_mode",
    "tf/test_fallback_warning",
    "tf/test_session_end",
    "tf/test_error_payloads",
    "deploy/test_wheel_role",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        if not any(item.get_closest_marker(t) for t in NEEDS):  # else the module chose its tier itself
            item.add_marker(getattr(pytest.mark, tier_of(path)))
        if _module_key(path) in SLOW_UNITS:
            item.add_marker(pytest.mark.slow)
    rank = {key: i for i, key in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_module_key(Path(str(item.path))), len(rank)))
