"""What the cluster's processes print on stdout, for the processes that started them.

A task (geryon.cluster.task) prints "READY <pid> <target>" once its server listens. A training loop
(geryon.demo.chief) writes one JSON event per line, each prefixed by MARKER.
"""

from __future__ import annotations

import json
import sys
from typing import Any

READY = "READY"
MARKER = "GERYON_DEMO "


def emit(event: dict[str, Any]) -> None:
    """One event line on stdout, MARKER first, flushed at once (the runner reads it as it comes)."""
    sys.stdout.write(MARKER + json.dumps(event) + "\n")
    sys.stdout.flush()
