"""deploy/prometheus: promtool validates the rules and the example config and runs the rules' unit tests;
every metric the rules read is one a real agent exposes (or a recording rule, or `up`); and a real
Prometheus evaluates the rules without errors against a real agent (a job whose pair has no flow) and a
dead target, raising GeryonPairMissingFlow and GeryonAgentDown for the right instances."""

from __future__ import annotations

import os
import re
import subprocess
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from live_agent import live_agent
from prom_server import PROMETHEUS, PROMTOOL, SCRAPE_JOB, api, free_port, prometheus, wait_for
from prometheus_client.parser import text_string_to_metric_families
from waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "prometheus"
RULES = DEPLOY / "geryon-rules.yml"
CONFIG = DEPLOY / "prometheus.yml"
UNIT_TESTS = sorted((DEPLOY / "tests").glob("*.yml"))
SEVERITIES = {"critical", "warning", "info"}
# Prometheus's own series the rules may read.
PROMETHEUS_SERIES = {"up"}

needs_promtool = pytest.mark.skipif(not os.path.exists(PROMTOOL), reason="promtool is not installed")
needs_prometheus = pytest.mark.skipif(
    not os.path.exists(PROMETHEUS), reason="the prometheus server is not installed"
)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root for network namespaces")


# --- metric names in PromQL ---

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_NAME_MATCHER = re.compile(r"""__name__\s*=~?\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)')""")
# A regex name matcher yields its pattern, which is never a known name: such selectors get flagged.
_MATCHERS = re.compile(r"\{[^{}]*\}")  # label matchers, once strings are gone
_RANGE = re.compile(r"\[[^\[\]]*\]")  # [5m], [1h:30s]
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
# A whole identifier (not part of a number or duration such as 1e3 or 15m) not followed by "(" (a call).
_IDENT = re.compile(r"(?<![\w:.])[A-Za-z_:][\w:]*(?![\w:])(?!\s*\()")
_KEYWORDS = {
    "and",
    "or",
    "unless",
    "atan2",
    "bool",
    "offset",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, aggregations,
    keywords, label names (in matchers or by/on/... lists) or parts of strings, numbers and durations."""
    names = {a or b for a, b in _NAME_MATCHER.findall(expr)}
    text = _STRING.sub('""', expr)
    text = _MATCHERS.sub(" ", text)
    text = _RANGE.sub(" ", text)
    text = _LABEL_LIST.sub(" ", text)
    names |= {m for m in _IDENT.findall(text) if m.lower() not in _KEYWORDS}
    return names


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        (
            'sum by (instance, class) (rate(geryon_class_sent_bytes_total{interface=~"eth.*", '
            'class!="by (x)"}[1m])) * 8',
            {"geryon_class_sent_bytes_total"},
        ),
        (
            'a:b:c * on (instance, class) group_left (priority) geryon_class_info{lossless="true"} > 0',
            {"a:b:c", "geryon_class_info"},
        ),
        ("quantile_over_time(0.5, foo[1h] offset 15m) and on(instance) bar == bool 1e3", {"foo", "bar"}),
        ('absent(up{job="geryon-agent"})', {"up"}),
        ("sum(rate(x_total[5m])) by (job) / ignoring(code) group_left y unless z", {"x_total", "y", "z"}),
        ('{__name__="named_metric", a="b"} or {__name__=~"re.*"}', {"named_metric", "re.*"}),
        ("max_over_time((foo - bar)[30m:1m]) > -Inf or time() - baz >= bool 600", {"foo", "bar", "baz"}),
        ('label_replace(m, "dst", "$1", "src", "(sum|rate) ignored")', {"m"}),
        ("a atan2 b", {"a", "b"}),
        ("clamp_max(rate(p[1m]), 1)", {"p"}),
    ],
)
def test_metric_names_finds_selected_metrics_only(expr: str, names: set[str]) -> None:
    assert metric_names(expr) == names


def rule_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(RULES.read_text())["groups"]
    return groups


def all_rules() -> list[dict[str, Any]]:
    return [r for g in rule_groups() for r in g["rules"]]


def recorded_names() -> set[str]:
    return {r["record"] for r in all_rules() if "record" in r}


def unknown_names(exprs: Iterable[str], known: set[str]) -> dict[str, set[str]]:
    """expression -> the metric names in it that are not in `known`."""
    out: dict[str, set[str]] = {}
    for expr in exprs:
        missing = metric_names(expr) - known
        if missing:
            out[expr] = missing
    return out


def exposed_names(exposition: str) -> set[str]:
    """Every series name a /metrics text can hold: sample names, and for families without samples the
    names their type gives them (a counter `x` is selected as `x_total`)."""
    out: set[str] = set()
    for fam in text_string_to_metric_families(exposition):
        out |= {s.name for s in fam.samples}
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
            "summary": ("", "_sum", "_count"),
        }.get(fam.type, ("",))
        out |= {fam.name + s for s in suffixes}
    return out


def test_unknown_names_flags_a_misspelled_or_unsuffixed_metric() -> None:
    known = {"geryon_class_dropped_packets_total", "geryon_class_info"}
    exprs = [
        "rate(geryon_class_dropped_packets_total[1m]) * on (class) group_left geryon_class_info",
        "rate(geryon_class_dropped_packet_total[1m])",  # misspelled
        "rate(geryon_class_dropped_packets[1m])",  # the family name, which selects nothing
    ]
    assert unknown_names(exprs, known) == {
        exprs[1]: {"geryon_class_dropped_packet_total"},
        exprs[2]: {"geryon_class_dropped_packets"},
    }
    exposition = (
        "# HELP geryon_x_bytes_total Bytes\n# TYPE geryon_x_bytes_total counter\n"
        '# HELP geryon_y Y\n# TYPE geryon_y gauge\ngeryon_y{a="1"} 2.0\n'
    )
    assert exposed_names(exposition) == {"geryon_x_bytes_total", "geryon_y"}


# --- promtool ---


def promtool(*args: str, cwd: Path) -> str:
    proc = subprocess.run(
        [PROMTOOL, *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"promtool {' '.join(args)} failed:\n{out}"
    return out


@needs_promtool
def test_promtool_check_rules() -> None:
    out = promtool("check", "rules", str(RULES), cwd=DEPLOY)
    assert f"SUCCESS: {len(all_rules())} rules found" in out


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    assert UNIT_TESTS, "no promtool unit tests in deploy/prometheus/tests"
    out = promtool("test", "rules", *(str(p) for p in UNIT_TESTS), cwd=DEPLOY / "tests")
    assert out.count("SUCCESS") == len(UNIT_TESTS), out


@needs_promtool
def test_promtool_check_example_config_resolves_the_rules(tmp_path: Path) -> None:
    # From another directory: the rule file path must resolve relative to the config file.
    out = promtool("check", "config", str(CONFIG), cwd=tmp_path)
    assert "SUCCESS: 1 rule files found" in out
    assert f"SUCCESS: {len(all_rules())} rules found" in out
    config = yaml.safe_load(CONFIG.read_text())
    assert [j["job_name"] for j in config["scrape_configs"]] == [SCRAPE_JOB]


def test_every_alert_is_documented_and_unit_tested_both_ways() -> None:
    """Each alert has `for`, a severity and summary + description; the promtool tests make each fire
    (exp_alerts given) and hold it back in a near miss (exp_alerts empty); each recording rule's value
    is checked by some promql_expr_test."""
    tests = [t for p in UNIT_TESTS for t in yaml.safe_load(p.read_text())["tests"]]
    fired = {a["alertname"] for t in tests for a in t.get("alert_rule_test", []) if a.get("exp_alerts")}
    quiet = {a["alertname"] for t in tests for a in t.get("alert_rule_test", []) if not a.get("exp_alerts")}
    checked: set[str] = set()
    for t in tests:
        for e in t.get("promql_expr_test", []):
            checked |= metric_names(e["expr"])
    problems = []
    for rule in all_rules():
        if "alert" in rule:
            name = rule["alert"]
            if "for" not in rule:
                problems.append(f"{name}: no `for`")
            if rule.get("labels", {}).get("severity") not in SEVERITIES:
                problems.append(f"{name}: severity must be one of {sorted(SEVERITIES)}")
            if not {"summary", "description"} <= set(rule.get("annotations", {})):
                problems.append(f"{name}: needs summary and description annotations")
            if name not in fired:
                problems.append(f"{name}: no unit test where it fires")
            if name not in quiet:
                problems.append(f"{name}: no unit test where it stays quiet")
        elif rule["record"] not in checked:
            problems.append(f"{rule['record']}: no promql_expr_test checks its value")
    assert not problems, "\n".join(problems)


# --- a real agent ---


@pytest.fixture(scope="module")
def agent() -> Iterator[str]:
    """A real agent's metrics endpoint (host:port) in a namespace with Geryon's HTB classes, with job
    'jp' registered (one PS-worker pair, both tasks listening, no connection: the pair misses its flows)
    and one iteration report with thresholds."""
    with live_agent("gfr") as live:
        live.register("jp")
        live.svc.jobs.report("jp", 0.5, [0.5])
        yield live.target


def scrape(target: str) -> str:
    with urllib.request.urlopen(f"http://{target}/metrics", timeout=10) as r:
        text: str = r.read().decode()
    return text


@needs_root
def test_rules_read_only_metrics_a_real_agent_exposes(agent: str) -> None:
    exposed = exposed_names(scrape(agent))
    # The series the rules join on exist here, so the joins are on real names.
    assert {
        "geryon_class_info",
        "geryon_job_threshold_changed_timestamp_seconds",
        "geryon_job_pairs",
    } <= exposed
    known = exposed | recorded_names() | PROMETHEUS_SERIES
    exprs = [r["expr"] for r in all_rules()]
    assert not unknown_names(exprs, known), (
        f"the rules read metrics no agent exposes: {unknown_names(exprs, known)}"
    )


def alerts_for(base: str) -> dict[tuple[str, str], str]:
    """(alertname, instance) -> state (pending or firing) of the alerts Prometheus holds now."""
    return {
        (a["labels"]["alertname"], a["labels"].get("instance", "")): a["state"]
        for a in api(base, "alerts")["alerts"]
    }


@needs_prometheus
@needs_root
def test_real_prometheus_evaluates_the_rules_and_alerts(agent: str, tmp_path: Path) -> None:
    assert re.search(r'^geryon_job_pairs\{geryon_job="jp",state="missing_flow"\} 1\.0$', scrape(agent), re.M)
    dead = f"127.0.0.1:{free_port()}"  # nobody listens there
    with prometheus(tmp_path, [agent, dead], rule_files=[RULES]) as base:
        want_groups = {g["name"] for g in rule_groups()}

        def evaluated(groups: list[dict[str, Any]]) -> bool:
            rules = [r for g in groups for r in g["rules"]]
            return {g["name"] for g in groups} == want_groups and all(r["health"] != "unknown" for r in rules)

        # geryon-jobs runs every 30 s: its first evaluation may take that long.
        groups = wait_until(
            "every rule group evaluated", lambda: api(base, "rules")["groups"], evaluated, timeout=75
        )
        broken = [
            (g["name"], r.get("name"), r.get("lastError"))
            for g in groups
            for r in g["rules"]
            if r["health"] != "ok"
        ]
        assert not broken, f"rules with evaluation errors: {broken}"

        want = {("GeryonPairMissingFlow", agent), ("GeryonAgentDown", dead)}
        held = wait_until(
            "GeryonPairMissingFlow for the agent and GeryonAgentDown for the dead target",
            lambda: alerts_for(base),
            lambda held: want <= set(held),
            timeout=60,
        )
        assert held[("GeryonPairMissingFlow", agent)] in ("pending", "firing")
        assert held[("GeryonAgentDown", dead)] in ("pending", "firing")
        # The live agent is up, in sync, drops nothing: none of those alerts names it.
        for name in (
            "GeryonAgentDown",
            "GeryonConfigDrift",
            "GeryonLosslessClassDrops",
            "GeryonScrapeErrors",
        ):
            assert (name, agent) not in held, (name, held)

        # The recording rules match the agent's real labels: the job just reported new thresholds, so it
        # is searching (0), and its class series are recorded per instance and class.
        converged = wait_for(base, f'instance_geryon_job:geryon_job_converged:bool{{instance="{agent}"}}', 1)
        assert [(r["metric"]["geryon_job"], r["value"][1]) for r in converged] == [("jp", "0")]
        sent = wait_for(base, f'instance_class:geryon_class_sent_bits:rate1m{{instance="{agent}"}}', 2)
        assert sorted(r["metric"]["class"] for r in sent) == ["bulk", "urgent"]
