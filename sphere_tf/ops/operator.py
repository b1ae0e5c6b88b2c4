"""The decoupled operator response f_d = h(‖w‖, ‖x‖)·g(θ) in cosine form   [D-3].

`decoupled_response` takes cos θ and the norms; the maths lives once, in
`response.decoupled_response_from_dot` (the layers' form, from ``dot = x·ŵ``),
which this wraps. SphereConv2D, DecoupledConv2D, SphereDense and DecoupledDense
call the latter with the dot products and norms of their own geometry.
"""

from keras import ops

from sphere_tf.ops import response

# Kernel weighting [D §3.5]: None (standard operators use ŵ only), 'linear'
# (h·‖w‖), 'nonlinear' (eq. 15, ‖w‖ inside the tanh) and 'nonlinear_separate'
# (eq. 16, a second tanh of ‖w‖).
WEIGHTINGS = (None, "linear", "nonlinear", "nonlinear_separate")
# The paper defines the nonlinear weightings for TanhConv only.
NONLINEAR_WEIGHTINGS = ("nonlinear", "nonlinear_separate")


def decoupled_response(
    cos_theta,
    x_norm,
    w_norm=None,
    magnitude="tanh",
    angular="cosine",
    alpha=1.0,
    beta=None,
    radius=None,
    k=None,
    weighted=None,
    weight_radius=None,
):
    """Decoupled operator output from cos θ and the norms, all float32.

    ```
    standard            f = h(‖x‖)·g(θ)                                  [D-3]
    weighted='linear'   f = ‖w‖·h(‖x‖)·g(θ)                              [D §3.5]
    'nonlinear'         f = α·tanh(‖w‖‖x‖ / r)·g(θ)                       [D-15]
    'nonlinear_separate' f = α·tanh(‖w‖ / ρ_w)·tanh(‖x‖ / r)·g(θ)        [D-16]
    ```

    Computed by `response.decoupled_response_from_dot` with ``dot = cos θ·‖x‖`` and
    ``1/‖x‖`` (the `keras.ops` reference; values equal to float32 rounding).

    Args:
        cos_theta: float32 tensor `(..., units)` of cosines.
        x_norm: float32 tensor broadcastable to `cos_theta` (> 0), the patch norms.
        w_norm: float32 tensor `(units,)`, kernel norms; needed when `weighted`.
        magnitude: registry name or `magnitude.Magnitude`.
        angular: registry name or callable `g(cos_theta, k)`.
        alpha, beta: floats, the magnitude hyperparameters.
        radius: float32 tensor broadcastable to `cos_theta`, r = ρ·E{‖x‖},
            for magnitudes with a radius.
        k: float or float32 tensor `(units,)`, the sigmoid parameter.
        weighted: one of `WEIGHTINGS`.
        weight_radius: float32 tensor `(units,)`, ρ_w of eq. 16.

    Returns:
        float32 tensor of the shape of `cos_theta`.
    """
    cos_theta = ops.cast(cos_theta, "float32")
    x_norm = ops.cast(x_norm, "float32")
    return response.decoupled_response_from_dot(
        cos_theta * x_norm, x_norm, 1.0 / x_norm, w_norm,
        magnitude=magnitude, angular=angular, alpha=alpha, beta=beta, radius=radius, k=k,
        weighted=weighted, weight_radius=weight_radius,
    )
