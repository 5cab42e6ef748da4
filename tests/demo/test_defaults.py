"""geryon.demo.defaults: the intents of more classes match the DSCPs the flows are marked with."""

from __future__ import annotations

from geryon.demo import defaults


def test_more_classes_get_an_intent_whose_dscps_match_the_flows_marks() -> None:
    default = defaults.intent_for(2)
    assert [c.dscp for c in default.classes] == [(46,), (26,)] == [(d,) for d in defaults.class_dscp(2)]
    three = defaults.intent_for(3)
    assert [c.dscp[0] for c in three.classes] == defaults.class_dscp(3)
    assert [c.scheduler for c in three.classes] == ["strict", "strict", "dwrr"]
    assert three.unmatched == three.classes[-1].name  # unmarked traffic: the least urgent queue
