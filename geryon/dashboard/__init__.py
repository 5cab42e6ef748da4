"""Grafana dashboards kept as code: house-style helpers over Grafana's foundation SDK (grafana.py), the
flow-priorities dashboard (flow_priorities.py), and `python -m geryon.dashboard --regenerate | --check` to
write or verify the JSON committed under deploy/grafana/dashboards/."""

from geryon.dashboard.flow_priorities import flow_priorities

__all__ = ["flow_priorities"]
