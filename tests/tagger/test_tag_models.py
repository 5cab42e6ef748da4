"""The tagger on real Keras models and real traced TensorFlow graphs (no mocks)."""

from __future__ import annotations

import math
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import pytest
import tensorflow as tf

from geryon.tagger import tag_model
from geryon.tagger.models import build_model
from geryon.tagger.tf_graph import TaggerInputError


def _dense_share_from_keras(model: keras.Model) -> float:
    """FC share computed independently of the tagger: from Keras' own layer classes and counts."""

    def size(weights) -> int:
        return sum(math.prod(w.shape) for w in weights)

    dense = sum(
        size(layer.trainable_weights) for layer in model.layers if isinstance(layer, keras.layers.Dense)
    )
    return dense / size(model.trainable_weights)


def _order(tagging) -> list[str]:
    return [tagging.params[i].name for i in tagging.consumption.order]


@pytest.fixture(scope="module")
def vgg19() -> keras.Model:
    return build_model("vgg19")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["vgg16", "vgg19"])
def test_vgg_first_conv_most_urgent_fc_least(name: str, vgg19: keras.Model) -> None:
    model = vgg19 if name == "vgg19" else build_model(name)
    for urgency in ("layer", "tic"):
        t = tag_model(model, urgency)
        order = _order(t)
        assert order[0] == "block1_conv1/kernel"
        u = dict(zip((p.name for p in t.params), t.urgency, strict=True))
        assert u["block1_conv1/kernel"] == max(u.values())
        fc = [n for n in u if n.startswith(("fc1/", "fc2/", "predictions/"))]
        conv = [n for n in u if n.startswith("block")]
        assert max(u[n] for n in fc) < min(u[n] for n in conv), urgency
        assert order[-6:] == [
            "fc1/kernel",
            "fc1/bias",
            "fc2/kernel",
            "fc2/bias",
            "predictions/kernel",
            "predictions/bias",
        ]
        # conv layers in block order: block1_conv1 < block1_conv2 < block2_conv1 < ...
        conv_kernels = [n for n in order if n.endswith("/kernel") and n.startswith("block")]
        assert conv_kernels == sorted(conv_kernels)
    summary = t.summary(t.map_table([0.5]))
    assert summary["dense_share"] == pytest.approx(_dense_share_from_keras(model), abs=1e-9)
    if name == "vgg19":
        assert round(summary["dense_share"] * 100, 2) == 86.06  # the paper's figure for VGG-19


def test_alexnet_fc_share_matches_the_paper() -> None:
    t = tag_model(build_model("alexnet"))
    share = t.summary(t.map_table([0.5]))["dense_share"]
    assert round(share * 100, 2) == 93.99
    assert _order(t)[0] == "alexnet/conv1/kernel"


@pytest.mark.slow
def test_yolo_fc_share_matches_the_paper() -> None:
    # YOLO v1 as Redmon et al. 2016 (Fig. 3) draw it: the Geryon paper's 77.86% in the FC layers.
    t = tag_model(build_model("yolo"))
    share = t.summary(t.map_table([0.5]))["dense_share"]
    assert round(share * 100, 2) == 77.86
    order = _order(t)
    assert order[0] == "yolo/conv1/kernel" and order[-1] == "yolo/fc2/bias"
    assert sum(p.bytes for p in t.params) == 271_703_550 * 4


@pytest.mark.slow
def test_resnet50_shortcut_and_main_path_in_forward_order() -> None:
    model = build_model("resnet50")
    t = tag_model(model)
    pos = {name: i for i, name in enumerate(_order(t))}
    assert len(pos) == len(model.trainable_variables) == 214
    # A projection block: the shortcut (0_conv) and the main path's first conv both read the block input,
    # so both come right after the stem and before the main path's second conv.
    for block in ("conv2_block1", "conv3_block1", "conv4_block1", "conv5_block1"):
        k = {i: pos[f"{block}_{i}_conv/kernel"] for i in range(4)}
        assert k[1] < k[2] < k[3]
        assert k[0] < k[2]
    assert pos["conv1_bn/beta"] < pos["conv2_block1_0_conv/kernel"]
    # The add that joins shortcut and main path comes before the next block: both branches' last
    # parameters precede the next block's first conv.
    for stage, blocks in (("conv2", 3), ("conv3", 4), ("conv4", 6), ("conv5", 3)):
        for b in range(1, blocks):
            nxt = pos[f"{stage}_block{b + 1}_1_conv/kernel"]
            assert pos[f"{stage}_block{b}_3_bn/beta"] < nxt
            if b == 1:
                assert pos[f"{stage}_block1_0_bn/beta"] < nxt
    # Stages in order, head last.
    assert pos["conv2_block3_3_bn/beta"] < pos["conv3_block1_1_conv/kernel"]
    assert pos["conv4_block6_3_bn/beta"] < pos["conv5_block1_1_conv/kernel"]
    assert _order(t)[-2:] == ["predictions/kernel", "predictions/bias"]
    summary = t.summary(t.map_table([0.5]))
    assert summary["dense_share"] == pytest.approx(_dense_share_from_keras(model), abs=1e-9)
    assert round(summary["dense_share"] * 100, 1) == 8.0  # paper: 8.02% (ours counts BN gamma/beta too)
    # Deterministic: a second trace of the same model gives the same urgencies.
    again = tag_model(model)
    assert again.urgency == t.urgency and _order(again) == _order(t)
    tic = tag_model(model, "tic")
    assert tag_model(model, "tic").urgency == tic.urgency


def _shared_and_tied_model() -> keras.Model:
    """Layers created in the reverse of their call order; one Dense shared; one kernel read by two layers."""

    class TiedDense(keras.layers.Layer):
        """Projects with the transpose of another layer's kernel (weight tying)."""

        def __init__(self, source: keras.layers.Dense, **kw):
            super().__init__(**kw)
            self.source = source

        def call(self, x):
            return keras.ops.matmul(x, keras.ops.transpose(self.source.kernel))

    head = keras.layers.Dense(3, name="head")
    shared = keras.layers.Dense(8, name="shared")
    first = keras.layers.Dense(8, name="first")
    tied = TiedDense(first, name="tied")
    x = keras.Input(shape=(8,))
    h = first(x)
    h = shared(h)
    h = shared(h)  # called twice: consumed at its first call
    h = tied(h)  # reads first/kernel again, late
    return keras.Model(x, head(h), name="shared_tied")


def test_shared_layer_and_tied_variable_take_their_first_use() -> None:
    model = _shared_and_tied_model()
    t = tag_model(model)
    order = _order(t)
    assert order == ["first/kernel", "first/bias", "shared/kernel", "shared/bias", "head/kernel", "head/bias"]
    assert len(t.params) == 6  # the tied kernel is one parameter, not two
    u = dict(zip((p.name for p in t.params), t.urgency, strict=True))
    assert u["first/kernel"] == u["first/bias"] == pytest.approx(1 - 1 / 3)
    assert u["shared/kernel"] == pytest.approx(1 - 2 / 3) and u["head/kernel"] == 0.0


def test_subclassed_model_needs_and_uses_input_shape() -> None:
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.late = keras.layers.Dense(2, name="late")
            self.early = keras.layers.Dense(4, name="early")

        def call(self, x, training=False):
            return self.late(self.early(x))

    net = Net()
    net(tf.zeros([1, 5]))
    with pytest.raises(TaggerInputError, match="input_shape"):
        tag_model(net)
    t = tag_model(net, input_shape=(5,))
    # Keras lists (and created) `late` first; the forward pass reads `early` first.
    assert next(v.path for v in net.trainable_variables) == "net/late/kernel"
    assert _order(t) == ["net/early/kernel", "net/early/bias", "net/late/kernel", "net/late/bias"]
    # Keras 3 gives both layers' tf.Variables the same runtime name; the key stays unique.
    assert {p.runtime_name for p in t.params} == {"net/kernel", "net/bias"}


def test_traced_concrete_function_and_tf1_graph() -> None:
    class Mlp(tf.Module):
        def __init__(self):
            self.w2 = tf.Variable(tf.ones([4, 2]), name="w2")
            self.w1 = tf.Variable(tf.ones([3, 4]), name="w1")
            self.step = tf.Variable(0, trainable=False, name="step")

        @tf.function(input_signature=[tf.TensorSpec([None, 3])])
        def __call__(self, x):
            return tf.matmul(tf.nn.relu(tf.matmul(x, self.w1)), self.w2)

    m = Mlp()
    t = tag_model(m.__call__.get_concrete_function())
    assert _order(t) == ["w1", "w2"]
    assert t.kinds == ("dense", "dense")

    g = tf.Graph()
    with g.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        with tf.compat.v1.variable_scope("out"):
            w_out = tf.compat.v1.get_variable("w", [4, 2])
        with tf.compat.v1.variable_scope("hidden"):
            w_hidden = tf.compat.v1.get_variable("w", [3, 4])
        tf.matmul(tf.matmul(x, w_hidden), w_out)
    t1 = tag_model(g)
    assert _order(t1) == ["hidden/w", "out/w"]
    assert [p.layer for p in t1.params] == ["out", "hidden"]


def test_model_without_trainable_variables_is_refused() -> None:
    model = keras.Sequential([keras.Input((4,)), keras.layers.ReLU()])
    with pytest.raises(TaggerInputError, match="no trainable variables"):
        tag_model(model)
    with pytest.raises(TaggerInputError, match="get_concrete_function"):
        tag_model(tf.function(lambda x: x))


def test_inception_towers_of_different_depth() -> None:
    """An Inception-style block: towers of depth 1, 3 and pool+1 joined by a concat, then a head conv."""
    x = keras.Input((16, 16, 8))
    a = keras.layers.Conv2D(4, 1, name="a1")(x)
    b = keras.layers.Conv2D(4, 1, name="b1")(x)
    b = keras.layers.Conv2D(4, 3, padding="same", name="b2")(b)
    b = keras.layers.Conv2D(4, 3, padding="same", name="b3")(b)
    c = keras.layers.MaxPooling2D(3, strides=1, padding="same", name="c_pool")(x)
    c = keras.layers.Conv2D(4, 1, name="c1")(c)
    y = keras.layers.Concatenate(name="mixed")([a, b, c])
    model = keras.Model(x, keras.layers.Conv2D(2, 1, name="head")(y))
    for urgency in ("layer", "tic"):
        t = tag_model(model, urgency)
        pos = {name: i for i, name in enumerate(_order(t))}
        k = {layer: pos[f"{layer}/kernel"] for layer in ("a1", "b1", "b2", "b3", "c1", "head")}
        # Every tower's first conv is needed before the deep tower's second one; the head comes last.
        assert max(k["a1"], k["b1"], k["c1"]) < k["b2"] < k["b3"] < k["head"]
        u = dict(zip((p.name for p in t.params), t.urgency, strict=True))
        assert u["head/kernel"] < min(v for n, v in u.items() if not n.startswith("head/"))
        assert u["a1/kernel"] > u["b2/kernel"] > u["b3/kernel"]


def test_with_urgency_equals_a_fresh_tag() -> None:
    model = build_model("alexnet")
    assert tag_model(model, "layer").with_urgency("tic") == tag_model(model, "tic")
