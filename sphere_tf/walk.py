"""One walk over a model's layer tree, and the calls of its graph, for every function that looks for layers.

`iter_layers` / `find_layers`: nested models are visited through `.layers`, custom
blocks through the layers they hold as attributes (directly, or in lists, tuples and
dicts), each layer once, parents before their children. Keras tracks sub-layers the
same way but exposes the walk only through private API (`Layer._flatten_layers`).

`graph_nodes` / `layer_calls`: the calls (Keras `Node`s: `operation`, `arguments`,
`input_tensors`, `outputs`) of a functional or Sequential model's own graph. Keras keeps
them in private attributes (`Functional._nodes_by_depth`, `Sequential._functional`);
this module is the one place of the package that reads them.

Needs Keras alone (no sphere_tf layer), so every tier may use it: the layers, the
regularizers (`track_state`), the callbacks, training and export.
"""

import keras

# Guards against pathological attribute graphs; real models are a few levels deep.
_MAX_DEPTH = 64


def iter_layers(root, descend=None):
    """Every `keras.layers.Layer` under `root` (itself included), depth first, without duplicates.

    Args:
        root: a `keras.Model` or `keras.layers.Layer`.
        descend: optional callable `layer -> bool`; False stops the walk below that
            layer (the layer itself is still yielded). Default: descend everywhere.

    Yields:
        layers, in a stable order (model order for Sequential and functional models).
    """
    seen = set()

    def visit(obj, depth):
        if depth > _MAX_DEPTH:
            return
        if isinstance(obj, keras.layers.Layer):
            if id(obj) in seen:
                return
            seen.add(id(obj))
            yield obj
            if descend is not None and not descend(obj):
                return
            if isinstance(obj, keras.Model):
                for layer in obj.layers:
                    yield from visit(layer, depth + 1)
            for value in list(vars(obj).values()):
                yield from visit(value, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                yield from visit(value, depth + 1)
        elif isinstance(obj, dict):
            for value in list(obj.values()):
                yield from visit(value, depth + 1)

    yield from visit(root, 0)


def find_layers(root, predicate, descend=None):
    """`[layer for layer in iter_layers(root, descend) if predicate(layer)]`."""
    return [layer for layer in iter_layers(root, descend) if predicate(layer)]


def graph_nodes(model):
    """The nodes (layer calls) of `model`'s own graph, or None for a model without one (subclassed, unbuilt).

    A layer's calls outside `model` (a head shared by a training and an inference model) are not included.
    """
    graph = getattr(model, "_functional", None) if isinstance(model, keras.Sequential) else model
    by_depth = getattr(graph, "_nodes_by_depth", None)
    if by_depth is None:
        return None
    return [node for nodes in by_depth.values() for node in nodes]


def call_graph(model, inputs):
    """Calls `model`'s layers again, in graph order, on new symbolic `inputs` (the structure of `model.inputs`:
    a tensor, a list or a dict); returns the new outputs in the structure of the model's outputs.

    Each node of the graph calls its layer again with the new tensors in place of the old (the same layer
    objects, so the same weights; Keras adds a node to each). Unlike `model(inputs)` this nests nothing, and
    unlike `model.call(inputs)` it adds no tensor-conversion operations between the new inputs and the layers:
    the result is a flat graph of the model's own layers.

    Raises:
        ValueError: `model` has no graph (subclassed or unbuilt), or `inputs` do not match its inputs.
    """
    nodes = graph_nodes(model)
    graph = getattr(model, "_functional", None) if isinstance(model, keras.Sequential) else model
    if nodes is None:
        raise ValueError(f"call_graph: {getattr(model, 'name', model)!r} has no graph (a subclassed or unbuilt model).")
    old_inputs, new_inputs = keras.tree.flatten(graph.input), keras.tree.flatten(inputs)
    if len(old_inputs) != len(new_inputs):
        raise ValueError(f"call_graph: {model.name!r} takes {len(old_inputs)} inputs; received {len(new_inputs)}.")
    tensors = {id(old): new for old, new in zip(old_inputs, new_inputs)}

    def swap(value):
        return tensors[id(value)] if isinstance(value, keras.KerasTensor) else value

    by_depth = graph._nodes_by_depth
    for depth in sorted(by_depth, reverse=True):  # the inputs have the largest depth, the outputs depth 0
        for node in by_depth[depth]:
            if isinstance(node.operation, keras.layers.InputLayer):
                continue
            args = keras.tree.map_structure(swap, node.arguments.args)
            kwargs = keras.tree.map_structure(swap, node.arguments.kwargs)
            outputs = node.operation(*args, **kwargs)
            for old, new in zip(keras.tree.flatten(node.outputs), keras.tree.flatten(outputs)):
                tensors[id(old)] = new
    return keras.tree.map_structure(swap, graph.output)


def layer_calls(model, layer):
    """The nodes of `model`'s graph that call `layer`, in graph order (`[]` when `model` has no graph)."""
    return [node for node in graph_nodes(model) or () if node.operation is layer]
