"""Orthogonalisation maps for Orthogonal Over-Parameterized Training (OPT).

Every map takes an unconstrained square parameter ``P`` of shape ``(..., d, d)``
(a batch of blocks is allowed, for PE-OPT) and returns an orthogonal ``R`` of the
same shape, differentiably, so that gradients reach ``P`` ("unrolling",
[T-7.3.3]).  All maths runs in float32 whatever the input dtype; the result is
float32 (callers cast the product ``R·V`` to their compute dtype).

| name            | R =                                   | reference            |
|-----------------|---------------------------------------|----------------------|
| `gram_schmidt`  | row-wise Gram-Schmidt of P = Q(Pᵀ)ᵀ    | [T-F.1], Alg. 1      |
| `householder`   | Householder Q-factor of P              | [T-7.3], Alg. 3      |
| `lowdin`        | polar factor U·Vᵀ of P = UΣVᵀ          | [T-7.4]              |
| `cayley`        | (I + S)(I − S)⁻¹, S = triu(P) − triu(P)ᵀ | [T-7.3.4]          |
| `exp`           | expm(S), S as for `cayley`             | [T-7.3.4]            |

`gram_schmidt` and `householder` are computed as a QR decomposition with the sign
fix ``Q ← Q·diag(sign(diag(R_qr)))``.  In exact arithmetic that *is* the
Gram-Schmidt process of the original code (each Gram-Schmidt vector is the
normalised residual, so its coefficient on itself is positive), without a d-step
loop and far more orthogonal in float32: at d = 576 classical Gram-Schmidt
reaches ‖RRᵀ − I‖_max ≈ 2e-3, the QR route ≈ 1e-6. `classical_gram_schmidt`
keeps the loop (Alg. 1, one vectorised step per row) for comparison and
benchmarks.

`orthogonality_penalty` is the soft-OPT relaxation ``‖RᵀR − I‖_F`` (the
original code's unsquared 0.1·‖RRᵀ − I‖_F; Eq. 7.7 squares it).
"""

import math

import keras
from keras import ops

from sphere_tf import registry
from sphere_tf import validation
from sphere_tf.ops import runtime_checks

# Default Newton–Schulz iterations for `lowdin(..., newton_schulz_iters=...)`.
# From X0 = P/‖P‖_F a Gaussian 576×576 P needs ≈ 30 steps to reach 1e-7.
DEFAULT_NEWTON_SCHULZ_ITERS = 40
# Guard on σ_i + σ_j in the polar-factor gradient (degenerate σ = 0 pairs).
_POLAR_GRAD_EPSILON = 1e-12
# Scaling and squaring for `expm` (Higham 2005, Table 2.3 single precision; as `tf.linalg.expm` for float32).
PADE7_THETA = 3.925724783138660
PADE7_COEFFICIENTS = (17297280.0, 8648640.0, 1995840.0, 277200.0, 25200.0, 1512.0, 56.0, 1.0)
# Each squaring doubles the rounding error: beyond 20 (‖S‖₁ ≈ 4e6) float32 has no digit left, so the
# loop stops there (see `expm`); the cap is also the fixed size XLA needs for the gradient.
MAX_SQUARINGS = 20


def read_float32(p):
    """The value of a tensor or (Keras or backend) variable as a float32 tensor.

    `keras.ops.convert_to_tensor` and `ops.cast` hand TensorFlow variables back
    unread (a custom gradient would then see a variable input); `ops.copy` reads
    them (`tf.identity`) and is a plain copy on the other backends.
    """
    return ops.cast(ops.copy(p), "float32")


_as_float32 = read_float32


def matrix_transpose(x):
    """``xᵀ`` over the last two axes (a stack of blocks transposes block by block)."""
    return ops.swapaxes(x, -1, -2)


def identity_blocks(shape, dtype="float32"):
    """Identity matrices broadcast to `shape` ``(..., d, d)`` (every map here sends them to R = I)."""
    return ops.broadcast_to(ops.eye(shape[-1], dtype=dtype), shape)


_mT = matrix_transpose


def _eye_like(p):
    return identity_blocks(ops.shape(p), p.dtype)


@keras.ops.custom_gradient
def _positive_diagonal_q(a):
    """Q-factor of a square ``a = QR`` with ``diag(R) >= 0`` (zero diagonal entries count as +).

    The gradient is the closed form of the QR derivative with no gradient on R
    (for square A, where ``QQᵀ = I``):

    ```
    Ā = Q · tril(QᵀQ̄ − Q̄ᵀQ) · R⁻ᵀ
    ```

    two matmuls and one triangular solve. The backends' registered QR gradients
    take the general (rectangular, R̄ ≠ 0) route: on TensorFlow that was about a
    quarter more per OPT step at d = 576–1152 (docs/opt.md). The signs make
    (Q, R) the positive-diagonal factorisation, to which the formula applies as
    it stands (the sign pattern is locally constant). As with the registered
    gradients, a rank-deficient A (a zero on R's diagonal) has no finite gradient.
    """
    q, r = ops.qr(a, mode="reduced")
    diag = ops.diagonal(r, axis1=-2, axis2=-1)
    signs = ops.where(diag < 0, -ops.ones_like(diag), ops.ones_like(diag))
    q = q * ops.expand_dims(signs, -2)
    r = r * ops.expand_dims(signs, -1)

    # Signature that works on every backend's `custom_gradient` (as `_polar_svd`).
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        x = ops.matmul(_mT(q), upstream)
        b = ops.matmul(q, ops.tril(x - _mT(x)))
        return _mT(ops.solve_triangular(r, _mT(b), lower=False))  # b·R⁻ᵀ

    return q, grad


def gram_schmidt(p):
    """Row-wise Gram-Schmidt orthonormalisation of ``P``  [T-F.1, Alg. 1].

    ``e_1 = p_1/‖p_1‖``, ``e_i ∝ p_i − Σ_{j<i} ⟨p_i, e_j⟩ e_j``: the rows of the
    result are the Gram-Schmidt basis of the rows of P, as in the original code
    (`opt_gs`, which loops over `P[i]`).  Computed as ``Q(Pᵀ)ᵀ`` with the
    positive-diagonal QR of Pᵀ, the same function in exact arithmetic.

    Args:
        p: float tensor ``(..., d, d)``, the raw (unconstrained) parameter.

    Returns:
        float32 tensor ``(..., d, d)`` with orthonormal rows.
    """
    p = _as_float32(p)
    return _mT(_positive_diagonal_q(_mT(p)))


def classical_gram_schmidt(p):
    """Unrolled classical Gram-Schmidt over the rows of ``P`` (Alg. 1; d steps).

    The formulation of the original code, one vectorised step per row:
    ``q = E·p_i``, ``t = p_i − Eᵀq``, ``e_i = t/‖t‖``.  It builds a graph with d
    steps and loses orthogonality in float32 (≈ 2e-3 at d = 576); use
    `gram_schmidt`, which is the same function computed by QR.  Kept for
    comparison and benchmarks.  Only static ``(d, d)`` shapes are supported.

    Args:
        p: float tensor ``(d, d)``.

    Returns:
        float32 tensor ``(d, d)`` with (approximately) orthonormal rows.
    """
    p = _as_float32(p)
    d = p.shape[-1]
    # Exact norms, no epsilon (unlike `angles.normalize`): this is the upstream loop, kept for comparison.
    rows = [p[0] / ops.norm(p[0])]
    for i in range(1, d):
        basis = ops.stack(rows)
        t = p[i] - ops.matmul(ops.matmul(basis, p[i]), basis)
        rows.append(t / ops.norm(t))
    return ops.stack(rows)


def householder(p):
    """Householder orthogonalisation of the columns of ``P``  [T-7.3, Alg. 3].

    ``H_{d−1}⋯H_1 P = R_upper`` and ``R = H_1⋯H_{d−1}``, i.e. the Q-factor of the
    QR decomposition of P (computed by LAPACK/Eigen Householder QR), with every
    column's sign fixed so that ``diag(R_upper) > 0``.

    Note: the original code (`opt_hr`) forms d − 1 dense reflections with the
    naive vector ``u = x − ‖x‖e_1`` (O(d⁴), cancellation-prone) and leaves the
    last column's sign unnormalised; this is the same map with the stable sign
    choice and all signs fixed.  It orthogonalises columns, `gram_schmidt` rows,
    so the two differ as functions of P, as upstream.

    Args:
        p: float tensor ``(..., d, d)``.

    Returns:
        float32 tensor ``(..., d, d)``, orthogonal.
    """
    return _positive_diagonal_q(_as_float32(p))


@keras.ops.custom_gradient
def _polar_svd(p):
    u, s, vt = ops.svd(p)
    v = _mT(vt)
    r = ops.matmul(u, vt)

    # Signature that works on every backend's `custom_gradient` (TF passes the upstream
    # positionally, JAX and PyTorch by keyword).
    def grad(*args, upstream=None):
        if upstream is None:
            (upstream,) = args
        g = upstream
        # dL/dP = U [(M − Mᵀ) / (σ_i + σ_j)] Vᵀ with M = Uᵀ G V: the exact polar-factor
        # derivative, free of the 1/(σ_i² − σ_j²) terms of the generic SVD gradient.
        m = ops.matmul(ops.matmul(_mT(u), g), v)
        denom = ops.expand_dims(s, -1) + ops.expand_dims(s, -2)
        denom = ops.maximum(denom, _POLAR_GRAD_EPSILON)
        return ops.matmul(ops.matmul(u, (m - _mT(m)) / denom), _mT(v))

    return r, grad


def newton_schulz_polar(p, num_iters=DEFAULT_NEWTON_SCHULZ_ITERS):
    """Polar factor of ``P`` by the Newton–Schulz (Björck) iteration.

    ``X_0 = P/‖P‖_F``, ``X_{k+1} = ½ X_k (3I − X_kᵀX_k)``; converges to U·Vᵀ when
    ``‖X_0‖_2 < √3`` (always true here).  Gradients are those of the unrolled
    iteration.

    Note: not in the OPT paper or code (wy1iu/OPT); an SVD-free Löwdin backend
    (Björck & Bowie, "An iterative algorithm for computing the best estimate of
    an orthogonal matrix", SIAM J. Numer. Anal. 1971). Results obtained with it
    should be labelled "LS via Newton–Schulz (k iters)".

    Args:
        p: float tensor ``(..., d, d)``.
        num_iters: int >= 1, number of iterations.

    Returns:
        float32 tensor ``(..., d, d)``.
    """
    p = _as_float32(p)
    norm = ops.sqrt(ops.sum(ops.square(p), axis=(-2, -1), keepdims=True))
    x = p / ops.maximum(norm, 1e-30)
    for _ in range(int(num_iters)):
        x = 1.5 * x - 0.5 * ops.matmul(x, ops.matmul(_mT(x), x))
    return x


def lowdin(p, newton_schulz_iters=None):
    """Löwdin symmetric orthogonalisation ``R = P (PᵀP)^{-1/2} = U·Vᵀ``  [T-7.4].

    The orthogonal matrix closest to P in Frobenius norm (the polar factor).  By
    default computed from the SVD ``P = UΣVᵀ`` as the original code does, with a
    custom gradient ``U[(M − Mᵀ)/(σ_i + σ_j)]Vᵀ`` (M = UᵀGV) instead of
    differentiating the SVD (whose 1/(σ_i² − σ_j²) terms blow up for close
    singular values).

    Note: under XLA (``jit_compile=True``) the SVD is XLA's own Jacobi SVD,
    which on CPU is orders of magnitude slower than LAPACK's once d reaches a
    few hundred (docs/opt.md); Keras does not pick XLA on CPU by itself, but with
    ``jit_compile=True`` on CPU prefer `newton_schulz_iters` (matmuls only).

    Args:
        p: float tensor ``(..., d, d)``.
        newton_schulz_iters: None (SVD) or int >= 1, use `newton_schulz_polar`.

    Returns:
        float32 tensor ``(..., d, d)``, orthogonal.
    """
    if newton_schulz_iters is not None:
        return newton_schulz_polar(p, newton_schulz_iters)
    return _polar_svd(_as_float32(p))


def skew_part(p):
    """``S = triu(P) − triu(P)ᵀ``: the skew-symmetric matrix the Cayley/exp maps use.

    Only the strict upper triangle of P matters (the diagonal cancels), as upstream
    (`opt_cp`: ``band_part(P, 0, -1)``).
    """
    p = _as_float32(p)
    upper = ops.triu(p)
    return upper - _mT(upper)


def cayley(p):
    """Cayley parameterisation ``R = (I + S)(I − S)⁻¹``, ``S = triu(P) − triu(P)ᵀ`` [T-7.3.4].

    Computed as ``solve(I − S, I + S)`` (the two factors commute; I − S has
    singular values ≥ 1, so the solve is always well conditioned) instead of the
    original's explicit inverse.  det R = +1: matrices with eigenvalue −1 are not
    reachable ([T-7.3.4]).

    Args:
        p: float tensor ``(..., d, d)``.

    Returns:
        float32 tensor ``(..., d, d)``, special orthogonal.
    """
    s = skew_part(p)
    eye = _eye_like(s)
    return ops.solve(eye - s, eye + s)


def cayley_product(p, v):
    """``R·V`` for the Cayley map, without forming R: ``solve(I − S, V + S·V)``.

    R = (I + S)(I − S)⁻¹ = (I − S)⁻¹(I + S), so ``R·V`` is one LU factorisation of I − S
    and a solve with V's c columns (about ⅔d³ + 6d²c flops forward, and as much again
    backward) instead of a solve with d columns and a d×d product (about 4⅔d³ forward);
    for an OPT layer (c = C_out ≪ d = kh·kw·C_in) that is most of the map's cost
    (docs/opt.md, "Cost of each orthogonalisation"). Same matrix in exact arithmetic;
    I − S is as well conditioned as in `cayley`.

    Args:
        p: float tensor ``(..., d, d)``.
        v: float tensor ``(..., d, c)`` with the same leading axes.

    Returns:
        float32 tensor ``(..., d, c)``.
    """
    s = skew_part(p)
    v = ops.cast(v, "float32")  # no copy of an OPT layer's float32 V (`read_float32` copies; no custom gradient here)
    return ops.solve(_eye_like(s) - s, v + ops.matmul(s, v))


def _pade7_terms(a, eye):
    """Odd and even parts ``(U, V)`` of the degree-7 Padé approximant of expm(a)."""
    b = PADE7_COEFFICIENTS
    a2 = ops.matmul(a, a)
    a4 = ops.matmul(a2, a2)
    a6 = ops.matmul(a4, a2)
    u = ops.matmul(a, b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    return u, v


def expm(a):
    """Matrix exponential by scaling and squaring with a degree-7 Padé approximant, float32.

    ```
    s = max(⌊log₂(‖A‖₁/θ₇)⌋, 0),   expm(A) ≈ r₇(A/2^s)^(2^min(s, MAX_SQUARINGS)),
    r₇ = (V − U)⁻¹(V + U)
    ```

    (Higham, "The scaling and squaring method for the matrix exponential
    revisited", SIAM J. Matrix Anal. Appl. 2005: θ₇ is the single-precision bound
    of Padé 7). Same scaling as `tf.linalg.expm` for float32, which rounds s down
    (one squaring less than the bound asks, and half the rounding error for these
    skew-symmetric, normal matrices); below θ₇ TF switches to Padé 3 or 5, here
    Padé 7 is always used. The squarings are MAX_SQUARINGS
    conditionals (`ops.cond`: square while ``i < s``), so the map compiles under
    XLA with its gradient (`tf.linalg.expm` loops without a maximum, which XLA
    rejects when differentiating: "XLA compilation requires a fixed tensor list
    size") and is reverse-differentiable on JAX (a `lax.while_loop` is not). The scale is shared by a batch of blocks (the largest norm).
    Beyond the cap (‖A‖₁ > 2^20·θ₇, where float32 squarings have no digit left)
    the result is expm(A/2^(s − MAX_SQUARINGS)): wrong, but finite and, for the
    skew-symmetric A of `exp`, orthogonal up to the rounding the squarings amplify
    (about 2^20 float32 ulps, ‖RᵀR − I‖ ≈ 0.06).

    Args:
        a: float tensor ``(..., d, d)`` with static shape.

    Returns:
        float32 tensor ``(..., d, d)``.
    """
    a = _as_float32(a)
    eye = _eye_like(a)
    l1_norm = ops.max(ops.sum(ops.abs(a), axis=-2))  # ‖A‖₁: largest column sum over all blocks
    squarings = ops.floor(ops.log(ops.maximum(l1_norm, 1e-30) / PADE7_THETA) / math.log(2.0))
    squarings = ops.maximum(squarings, 0.0)
    u, v = _pade7_terms(a / ops.power(2.0, squarings), eye)
    r = ops.solve(v - u, v + u)
    count = ops.cast(squarings, "int32")
    # Unrolled: Keras's TF `fori_loop` sets no `maximum_iterations` (XLA then cannot size the
    # gradient's stacks) and JAX cannot reverse-differentiate a `while_loop`; conditionals can.
    for i in range(MAX_SQUARINGS):
        r = runtime_checks.cond(i < count, lambda r=r: ops.matmul(r, r), lambda r=r: r)
    return r


def exp(p):
    """Exponential parameterisation ``R = expm(S)``, ``S = triu(P) − triu(P)ᵀ`` [T-7.3.4].

    Note: mentioned in the thesis without experiments; S is built as for `cayley`.
    `expm` compiles under XLA (``jit_compile=True``) with its gradient.

    Args:
        p: float tensor ``(..., d, d)``.

    Returns:
        float32 tensor ``(..., d, d)``, special orthogonal.
    """
    return expm(skew_part(p))


def orthogonality_penalty(r, squared=False):
    """Soft-OPT penalty ``‖RᵀR − I‖_F`` (or its square), summed over leading block axes.

    ``[T-7.7]`` uses the squared Frobenius norm; the original code (`opt_or`) adds
    ``0.1·‖RRᵀ − I‖_F`` unsquared.  For square R both Gram forms have the same
    Frobenius distance to I (RᵀR and RRᵀ share their eigenvalues).

    Note: the unsquared norm is evaluated as ``sqrt(max(‖·‖², 1e-12))`` so that its
    gradient is finite (zero) at an exactly orthogonal R.

    Args:
        r: float tensor ``(..., d, d)``.
        squared: bool, return the squared norm (Eq. 7.7).

    Returns:
        float32 scalar.
    """
    r = _as_float32(r)
    gram = ops.matmul(_mT(r), r)
    sq = ops.sum(ops.square(gram - _eye_like(gram)), axis=(-2, -1))
    if squared:
        return ops.sum(sq)
    return ops.sum(ops.sqrt(ops.maximum(sq, 1e-12)))


def orthogonality_error(r):
    """``max |RᵀR − I|`` over all entries (and blocks), float32."""
    r = _as_float32(r)
    gram = ops.matmul(_mT(r), r)
    return ops.max(ops.abs(gram - _eye_like(gram)))


ORTHOGONALIZATION_FNS = {
    "gram_schmidt": gram_schmidt,
    "householder": householder,
    "lowdin": lowdin,
    "cayley": cayley,
    "exp": exp,
}


# Maps whose product ``Orth(P)·V`` is cheaper computed directly than as ``matmul(Orth(P), V)``:
# name -> ``fn(p, v)`` (float32, ``(..., d, d)`` and ``(..., d, c)``); `sphere_tf.layers.OPTLayer` takes it.
ORTHOGONAL_PRODUCT_FNS = {
    "cayley": cayley_product,
}


def get_orthogonalization(identifier):
    """Resolve a registry name (or pass a callable through) to an orthogonalisation map."""
    if callable(identifier):
        return identifier
    return registry.lookup(ORTHOGONALIZATION_FNS, identifier, "orthogonalization")


def register_orthogonalization(name, fn):
    """Add ``fn(p) -> R`` (float32, ``(..., d, d)``) to the registry under ``name``."""
    if not callable(fn):
        raise validation.invalid_argument("fn", "a callable", fn)
    return registry.register(ORTHOGONALIZATION_FNS, name, fn, "Orthogonalization")
