"""`value_and_grad(fn, x)`: a gradient outside a Keras train step, on every Keras backend.

Keras 3 has no backend-neutral gradient op (its train steps use `tf.GradientTape`,
`jax.value_and_grad` or `torch.autograd` directly). A few sphere_tf computations
need one inside a loss or an initialiser: the unrolled projection step of AP- and
Adv-CoMHE (thesis [T-6.7]/[T-6.8], ``P' = P ∓ η ∂J/∂P``) and the energy descent of
`sphere_tf.initializers`; the adversarial attacks of
`sphere_tf.adversarial.gradient_attacks` take `input_gradient`, the gradient of a
batch of per-example losses with respect to the batch, held constant. This module is
the one place that dispatches on `keras.backend.backend()`; each branch imports its
framework lazily, so importing sphere_tf needs none of them.

The gradient is itself differentiable: an outer gradient (the train step's, or a
second `value_and_grad`) sees its dependence on whatever `fn` closes over, which is
how the unrolled CoMHE step lets second-order terms reach the layer's kernel.
"""

import keras


def value_and_grad(fn, x):
    """`(fn(x), ∂fn/∂x)` for a scalar-valued `fn` of one float tensor `x`.

    Args:
        fn: callable mapping a tensor of `x`'s shape to a scalar tensor (written in
            `keras.ops`; it may close over other tensors, which the returned gradient
            keeps depending on).
        x: float tensor (or `keras.Variable`, read once) at which to differentiate.

    Returns:
        `(value, grad)`: the scalar `fn(x)` and a tensor of `x`'s shape.

    Raises:
        ValueError: for a Keras backend other than tensorflow, jax or torch.
    """
    if isinstance(x, keras.Variable):
        x = x.value
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(x)
        # A nested tape: an enclosing tape records the gradient computation itself.
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = fn(x)
        return value, tape.gradient(value, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    if backend == "jax":
        import jax

        # jax.value_and_grad composes with an enclosing jax.grad (reverse over reverse).
        return jax.value_and_grad(fn)(x)
    if backend == "torch":
        import torch

        outer_grad = torch.is_grad_enabled()
        x = torch.as_tensor(x)
        if not x.requires_grad:
            x = x.detach().requires_grad_(True)
        with torch.enable_grad():  # Keras evaluates under no_grad; the inner gradient still needs a graph
            value = fn(x)
            # create_graph only when an outer gradient is being recorded (keeps the graph otherwise free).
            (grad,) = torch.autograd.grad(value, x, create_graph=outer_grad, allow_unused=True)
        if grad is None:
            grad = torch.zeros_like(x)
        if not outer_grad:
            value, grad = value.detach(), grad.detach()
        return value, grad
    raise ValueError(
        f"sphere_tf.ops.autodiff.value_and_grad supports the tensorflow, jax and torch Keras backends. "
        f"Received: KERAS_BACKEND={backend!r}"
    )


def input_gradient(fn, x):
    """`∂(Σ fn(x))/∂x` as a constant: the gradient of a batch of per-example losses with respect to the batch.

    What an attack steps along (FGSM's `sign(∇ₓJ)`): no gradient flows back through the result, and no graph of
    the model's weights is kept. On TensorFlow the tape differentiates the vector `fn(x)` itself, as
    cleverhans' `compute_gradient` does (the same numbers as the gradient of its sum).

    Args:
        fn: callable mapping a tensor of `x`'s shape to per-example losses (any shape; a scalar too), in `keras.ops`.
        x: float tensor (or array) at which to differentiate.

    Returns:
        A tensor of `x`'s shape (zeros where `fn` does not depend on `x`).

    Raises:
        ValueError: for a Keras backend other than tensorflow, jax or torch.
    """
    if isinstance(x, keras.Variable):
        x = x.value
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        x = tf.convert_to_tensor(x)
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = fn(x)
        grad = tape.gradient(value, x, unconnected_gradients=tf.UnconnectedGradients.ZERO)
        return tf.stop_gradient(grad)
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        return jax.lax.stop_gradient(jax.grad(lambda t: jnp.sum(fn(t)))(jnp.asarray(x)))
    if backend == "torch":
        import torch

        x = keras.ops.convert_to_tensor(x).detach().requires_grad_(True)
        with torch.enable_grad():  # Keras evaluates under no_grad; the input gradient still needs a graph
            value = fn(x)
            (grad,) = torch.autograd.grad(value.sum(), x, allow_unused=True)
        return torch.zeros_like(x).detach() if grad is None else grad.detach()
    raise ValueError(
        f"sphere_tf.ops.autodiff.input_gradient supports the tensorflow, jax and torch Keras backends. "
        f"Received: KERAS_BACKEND={backend!r}"
    )


def compiled(fn, signature=None, jit_compile=False):
    """`fn` compiled once by the backend's tracer, for a loop of small steps outside a train step.

    `tf.function` on TensorFlow, `jax.jit` on JAX; PyTorch runs `fn` as is (eager
    dispatch is cheap there, and `torch.compile` would cost more than it saves for
    the few thousand steps of an initialiser). `fn` must be a pure function of
    tensors.

    `signature`, optional, is a sequence of `(shape, dtype)` per positional argument (None for a dimension of
    any size): TensorFlow then traces once for every batch size (`input_signature`). JAX compiles once per
    shape whatever it says; PyTorch ignores it. `jit_compile` asks TensorFlow for XLA (JAX always compiles with
    it, PyTorch runs eagerly).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        if signature is not None:
            specs = [tf.TensorSpec(shape, dtype) for shape, dtype in signature]
            return tf.function(fn, autograph=False, input_signature=specs, jit_compile=jit_compile)
        return tf.function(fn, autograph=False, jit_compile=jit_compile)
    if backend == "jax":
        import jax

        return jax.jit(fn)
    return fn


class ModelFunction:
    """`body(model_fn, *args)` on one Keras model in inference mode, compiled once by the backend.

    `model_fn` is `x -> model(x, training=False)`. On TensorFlow the body is one `tf.function` with `signature`
    as its input signature (one trace for every batch size); on JAX one `jax.jit` of a pure function of the
    model's variable values (`model.stateless_call`), so the compiled function always sees the current weights
    (one compilation per argument shape); PyTorch runs the body eagerly, under `torch.no_grad()` when
    `gradients` is False (inference that keeps no autograph graph). Calling it converts the arguments to the
    signature's dtypes and returns the backend's tensor. `traces` counts the runs of the Python body: traces on
    TensorFlow and JAX, calls on PyTorch.

    Args:
        model: a `keras.Model`.
        body: callable `(model_fn, *args) -> tensor` in `keras.ops`.
        signature: sequence of `(shape, dtype)` per argument (None for a dimension of any size).
        jit_compile: bool, XLA on TensorFlow (`compiled`).
        gradients: bool, False when the body takes no gradient (PyTorch then records none).
    """

    def __init__(self, model, body, signature, *, jit_compile=False, gradients=True):
        self.traces = 0
        self._dtypes = [dtype for _, dtype in signature]

        def counted(model_fn, *args):
            self.traces += 1
            return body(model_fn, *args)

        backend = keras.backend.backend()
        if backend == "jax":
            def pure(trainable, non_trainable, *args):
                def model_fn(x):
                    return model.stateless_call(trainable, non_trainable, x, training=False)[0]
                return counted(model_fn, *args)

            jitted = compiled(pure)

            def run(*args):
                return jitted([v.value for v in model.trainable_variables],
                              [v.value for v in model.non_trainable_variables], *args)
        else:
            def model_fn(x):
                return model(x, training=False)

            def compiled_body(*args):  # one code object for every model (TensorFlow's retracing detector names it)
                return counted(model_fn, *args)

            run = compiled(compiled_body, signature, jit_compile)
            if backend == "torch" and not gradients:
                import torch

                eager = run

                def run(*args):
                    with torch.no_grad():
                        return eager(*args)
        self.function = run

    def __call__(self, *args):
        return self.function(*(keras.ops.convert_to_tensor(a, dtype) for a, dtype in zip(args, self._dtypes)))
