"""What the cluster's processes print on stdout, for the processes that started them.

A task (geryon.cluster.task) prints "READY <pid> <target>" once its server listens. A training loop
(geryon.demo.chief) writes one JSON event per line, each prefixed by MARKER.
"""

from __future__ import annotations

READY = "READY"
MARKER = "GERYON_DEMO "
