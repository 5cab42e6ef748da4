"""Grafana dashboards kept as code: plain-dict builders (grafana.py), the flow-priorities dashboard
(flow_priorities.py), and `python -m geryon.dashboard --regenerate | --check` to write or verify the JSON
committed under deploy/grafana/dashboards/. No third-party imports."""

from geryon.dashboard.flow_priorities import flow_priorities

__all__ = ["flow_priorities"]
