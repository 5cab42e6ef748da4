"""The tagger: which parameters the forward pass needs first, how big they are, which flow each takes.

`tag_model` is the front door; it imports TensorFlow lazily so the rest of Geryon (and this package's
pure modules) work on hosts without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from geryon.tagger.map_table import MapTable
from geryon.tagger.params import Parameter
from geryon.tagger.tagging import Tagging

__all__ = ["MapTable", "Parameter", "Tagging", "tag_model"]


def tag_model(
    model: Any, urgency: str = "layer", input_shape: Sequence[int] | None = None, training: bool = True
) -> Tagging:
    """Tags a Keras model, a traced `tf.function` (ConcreteFunction) or a TF1 `tf.Graph`.

    The model is traced, not run: its forward graph gives the consumption order of its parameters.
    """
    import tensorflow as tf

    from geryon.tagger import tf_graph

    if isinstance(model, tf.Graph):
        params, graph = tf_graph.trace_tf1_graph(model)
    elif hasattr(model, "graph") and hasattr(model, "structured_input_signature"):
        params, graph = tf_graph.trace_concrete_function(model)
    elif hasattr(model, "get_concrete_function") and not hasattr(model, "trainable_variables"):
        raise tf_graph.TaggerInputError(
            "a tf.function must be traced first: pass fn.get_concrete_function(<input specs>)"
        )
    elif hasattr(model, "trainable_variables") and callable(model):
        params, graph = tf_graph.trace_keras_model(model, input_shape, training)
    else:
        raise tf_graph.TaggerInputError(
            f"cannot tag a {type(model).__name__}: expected a Keras model, a ConcreteFunction or a tf.Graph"
        )
    return Tagging.from_graph(params, graph, urgency)
