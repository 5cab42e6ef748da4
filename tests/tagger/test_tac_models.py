"""TAC on the real InceptionV3 graph (TensorFlow: tier tf): where op times differ, its order differs
from TIC's; it is deterministic; every parameter gets one priority."""

from __future__ import annotations

import zlib

from geryon.tagger import tag_model
from geryon.tagger.models import build_model
from geryon.tagger.tac import OpTimes


def test_inceptionv3_tac_differs_from_tic_where_op_times_differ() -> None:
    model = build_model("inceptionv3")
    tic = tag_model(model, "tic")
    # Constructed times: each consuming op 1-8 ms by a hash of its name, transfers at 10 Gbit/s.
    compute = {op: 1e-3 * (1 + zlib.crc32(op.encode()) % 8) for op in tic.consumer_ops if op is not None}
    times = OpTimes(compute, {p.name: p.bytes * 8 / 1e10 for p in tic.params}, "constructed")
    tac = tic.with_tac(times)
    assert tac == tic.with_tac(times)  # deterministic
    n = len(tic.params)
    consumed = [i for i, c in enumerate(tic.consumption.consumer) if c is not None]
    assert sorted(round((1 - tac.urgency[i]) * n) for i in consumed) == list(range(1, len(consumed) + 1))

    def order(t: object) -> list[int]:
        u = t.urgency  # type: ignore[attr-defined]
        pos = {p: k for k, p in enumerate(tic.consumption.order)}
        return sorted(consumed, key=lambda i: (-u[i], pos[i]))

    assert order(tac) != order(tic)
