"""The simulator's transports (simknobs.TRANSPORTS): tf-grpc as before, tf-verbs as TF 1.x's RDMA
rendezvous documents itself, geryon as this project's data plane (hybrid)."""

from __future__ import annotations

import itertools
import random
from collections import defaultdict

import pytest

from geryon.cli import main as geryon_main
from geryon.threshold.profile import synthetic
from geryon.threshold.simknobs import TRANSPORTS, VERBS_ACK_S
from geryon.threshold.simulator import simulate

from .test_simulator import random_profile, vgg19_like


def _same(a, b, drop=("wall_s",)):
    da, db = a.to_dict(), b.to_dict()
    for k in drop:
        da.pop(k, None)
        db.pop(k, None)
    return da == db


@pytest.mark.parametrize("mode", ["fifo", "network"])
@pytest.mark.parametrize("colocate", [False, True])
def test_tf_grpc_is_the_default_and_changes_nothing(mode, colocate):
    p = vgg19_like()
    kw = dict(workers=4, num_ps=2, bandwidth_bps=10e9, mode=mode, slice_bytes=4 << 20, colocate=colocate)
    for inflight in (None, 3.5):
        base = simulate(p, inflight=inflight, **kw)
        explicit = simulate(p, inflight=inflight, transport="tf-grpc", verbs_ack_s=1.0, **kw)
        assert base.transport == explicit.transport == TRANSPORTS[0] == "tf-grpc"
        assert _same(base, explicit, drop=("wall_s", "verbs_ack_s"))


def test_hand_computed_one_tensor_at_a_time_in_request_order():
    # 1000 B/s, pulls of 1000 B (layer 0) and 3000 B (layer 1) ready at once: the channel writes them
    # one after the other in the order the worker's requests came, which TF does not fix.
    # Order (0, 1): layer 0 arrives at 1 s, layer 1 at 4 s; forward 0 1..4, forward 1 4..5,
    # backward 1 5..6, push 1 6..9, backward 0 6..7, push 0 queued behind it: 9..10.
    # Order (1, 0): layer 1 0..3, layer 0 3..4; forward 4..8, backward 8..10, push 1 9..12, push 0 12..13.
    p = synthetic([1000, 3000], [3.0, 1.0], [1.0, 1.0])
    kw = dict(workers=1, num_ps=1, bandwidth_bps=8000, mode="fifo", iterations=1, transport="tf-verbs")
    seen = {round(simulate(p, seed=s, verbs_ack_s=0.0, **kw).iteration_s, 9) for s in range(16)}
    assert seen == {10.0, 13.0}
    # A 2 s ACK round trip: the second request arrives 2 s after the first, and push 0 (ready at 8)
    # could post at 9 but waits for push 1 anyway: order (0, 1) takes 11 s, order (1, 0) still 13 s.
    seen = {round(simulate(p, seed=s, verbs_ack_s=2.0, **kw).iteration_s, 9) for s in range(16)}
    assert seen == {11.0, 13.0}
    # The same seed, the same order.
    assert simulate(p, seed=3, **kw).iteration_s == simulate(p, seed=3, **kw).iteration_s


def _channel_spans(r):
    by_channel = defaultdict(list)
    for s in r.spans:
        if s.category in ("pull", "push"):
            by_channel[(s.host, s.track)].append(s)
    return by_channel


@pytest.mark.parametrize("mode", ["fifo", "network"])
def test_a_channel_writes_one_tensor_at_a_time_and_posts_one_per_ack(mode):
    rng = random.Random(5)
    ack = 1e-3
    for _ in range(6):
        p = random_profile(rng, layers=rng.randint(3, 7))
        r = simulate(
            p,
            workers=3,
            num_ps=2,
            bandwidth_bps=rng.choice([1e6, 1e7]),
            mode=mode,
            iterations=2,
            trace=True,
            symmetric=False,
            slice_bytes=4000,
            transport="tf-verbs",
            verbs_ack_s=ack,
            seed=rng.randrange(1000),
        )
        channels = _channel_spans(r)
        assert channels
        for spans in channels.values():
            spans.sort(key=lambda s: s.start_s)
            for a, b in itertools.pairwise(spans):
                assert b.start_s >= a.end_s - 1e-12  # one write at a time
            # One request per ACK round trip: the k-th write of a channel posts k round trips in or later.
            for k, span in enumerate(spans):
                assert span.start_s >= k * ack - 1e-12


def test_pushes_go_in_the_order_backward_made_them():
    # One PS, one class: the gradients of later layers are ready first, and a channel posts in
    # ready order, so the push spans of an iteration start last layer first.
    p = synthetic([4000] * 5, [1e-3] * 5, [1e-3] * 5)
    r = simulate(
        p, workers=1, num_ps=1, bandwidth_bps=1e6, mode="fifo", trace=True, transport="tf-verbs", iterations=1
    )
    pushes = sorted((s for s in r.spans if s.category == "push"), key=lambda s: s.start_s)
    assert [s.args["layer"] for s in pushes] == [4, 3, 2, 1, 0]


def test_network_keeps_one_channel_per_class_and_they_overlap():
    # The paper's Geryon: two channels per pair (one per class), each one tensor at a time; a class 0
    # write may run while a class 1 write is under way (strict priority at the ports, not one queue).
    p = vgg19_like()
    r = simulate(
        p,
        workers=2,
        num_ps=1,
        bandwidth_bps=1e9,
        mode="network",
        thresholds=(0.5,),
        trace=True,
        symmetric=False,
        slice_bytes=4 << 20,
        transport="tf-verbs",
    )
    channels = _channel_spans(r)
    tracks = {track for _, track in channels}
    assert any(t.endswith("class 0") for t in tracks) and any(t.endswith("class 1") for t in tracks)
    by_pair = defaultdict(list)
    for (host, track), spans in channels.items():
        by_pair[(host, track.rsplit(" class", 1)[0])].extend(spans)
    overlapped = False
    for spans in by_pair.values():
        spans.sort(key=lambda s: s.start_s)
        overlapped |= any(b.start_s < a.end_s - 1e-9 for a, b in itertools.pairwise(spans))
    assert overlapped


def test_verbs_is_never_faster_than_its_own_serial_order_with_a_slower_ack():
    p = vgg19_like()
    kw = dict(workers=4, num_ps=4, bandwidth_bps=10e9, mode="network", slice_bytes=1 << 20, colocate=True)
    times = [simulate(p, transport="tf-verbs", verbs_ack_s=a, **kw).iteration_s for a in (0, 1e-5, 1e-3)]
    assert times[0] <= times[1] <= times[2]
    assert times[2] > times[0]


def test_geryon_transport_is_the_data_plane():
    p = vgg19_like()
    kw = dict(workers=4, num_ps=2, bandwidth_bps=10e9, slice_bytes=4 << 20, colocate=True, thresholds=(0.5,))
    hybrid = simulate(p, mode="hybrid", **kw)
    network = simulate(p, mode="network", transport="geryon", **kw)
    assert network.mode == "network" and network.transport == "geryon"
    assert _same(hybrid, network, drop=("wall_s", "mode", "transport"))
    # fifo on it: the data plane with no map_table, every tensor in one class.
    fifo = simulate(p, mode="fifo", transport="geryon", trace=True, **kw)
    assert fifo.thresholds == ()
    assert {s.args["class"] for s in fifo.spans if s.category in ("pull", "push")} == {0}
    one_class = simulate(p, mode="fifo", transport="geryon", **kw)
    assert one_class.iteration_s == fifo.iteration_s


@pytest.mark.parametrize("mode", ["end-host", "hybrid", "ideal"])
def test_modes_with_their_own_order_take_no_transport(mode):
    p = vgg19_like()
    kw = dict(workers=4, num_ps=2, bandwidth_bps=10e9, mode=mode, slice_bytes=4 << 20)
    base = simulate(p, **kw)
    for transport in TRANSPORTS:
        assert _same(base, simulate(p, transport=transport, **kw), drop=("wall_s", "transport"))


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"transport": "rdma"}, "transport: unknown transport 'rdma'; allowed: tf-grpc, tf-verbs, geryon"),
        ({"transport": "tf-verbs", "verbs_ack_s": -1.0}, "verbs_ack_s: expected a finite number of seconds"),
        ({"verbs_ack_s": float("nan")}, "verbs_ack_s"),
    ],
)
def test_bad_transport_arguments_name_themselves(kw, message):
    p = synthetic([1000], [1.0], [1.0])
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        simulate(p, workers=1, num_ps=1, bandwidth_bps=8000, mode="fifo", **kw)


def test_result_records_the_transport():
    p = synthetic([1000], [1.0], [1.0])
    r = simulate(p, workers=1, num_ps=1, bandwidth_bps=8000, mode="fifo", transport="tf-verbs")
    d = r.to_dict()
    assert d["transport"] == "tf-verbs" and d["verbs_ack_s"] == VERBS_ACK_S


def _cli(capsys, *argv):
    code = geryon_main(["simulate", "--model", "resnet50", "--workers", "4", "--ps", "2", "--quiet", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_runs_each_transport_and_says_which(capsys):
    code, out, _ = _cli(capsys, "--transport", "tf-verbs", "--mode", "fifo", "network")
    assert code == 0
    assert "transport tf-verbs (ACK round trip 1.66 us)" in out
    code, out, _ = _cli(capsys, "--transport", "geryon", "--mode", "network", "--json")
    assert code == 0 and '"transport": "geryon"' in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--transport", "verbs"], "--transport: invalid choice: 'verbs'"),
        (["--verbs-ack", "1e-6"], "--verbs-ack: only with --transport tf-verbs, not tf-grpc"),
        (["--transport", "tf-verbs", "--verbs-ack", "-1"], "--verbs-ack: expected seconds >= 0"),
    ],
)
def test_cli_bad_transport_flags_exit_2(capsys, argv, message):
    try:
        code, _, err = _cli(capsys, *argv)
    except SystemExit as e:  # argparse's own errors
        code, err = e.code, capsys.readouterr().err
    assert code == 2
    assert message in err
