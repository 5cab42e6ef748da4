"""The run config the prediction tests simulate by default: one worker and one PS on a 1 MB/s (8 Mbit/s)
link, whole tensors (no slicing), two classes. A test names only what it changes."""

from __future__ import annotations

from typing import Any


def one_link(**changes: Any) -> dict[str, Any]:
    return {"workers": 1, "ps": 1, "rate_bits": 8e6, "slice_bytes": None, "classes": 2, **changes}
