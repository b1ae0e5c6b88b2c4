// Compiled kernels of sphere_tf's training path (sphere_tf/ops/fused.py).
//
// SphereTfTanhCosine / SphereTfTanhCosineGrad: the TanhConv + cosine tail
//   f[p, j] = dot[p, j] * tanh(n[p] * a[j]) * v[p]
// with n = ‖x‖ and v = α/‖x‖ per output position p (rows) and a = 1/(ρ_j E‖x‖) per
// filter j, and its gradient in one pass over the rows:
//   ∂L/∂dot = G·tanh·v,  r = G·dot·(1 − tanh²),
//   ∂L/∂n[p] = v[p]·Σ_j r·a_j,  ∂L/∂v[p] = Σ_j G·dot·tanh,  ∂L/∂a_j = Σ_p r·v[p]·n[p].
// TensorFlow cannot fuse these elementwise passes and XLA runs them on one thread;
// here every row is one vectorised Eigen loop (Eigen's tanh), rows split across
// TensorFlow's intra-op threads. ∂L/∂a is summed per fixed block of rows first,
// so the result does not depend on the thread count.
//
// With squared = true the numerator is u = dot·|dot| instead of dot (square-cosine
// g = c·|c| with the 1/‖x‖² folded into v), du/ddot = 2|dot|.
//
// SphereTfRescale / SphereTfRescaleGrad: f = u·v for magnitudes whose h(‖x‖) is one
// value per position (SphereConv, LinearConv with square cosine, log, mix, ...):
// ∂L/∂dot = G·v·du/ddot and ∂L/∂v = Σ_j G·u in one pass.
//
// SphereTfThetaActivation / SphereTfThetaActivationGrad: SphereConv's linear and
// fixed-k sigmoid g(θ) from the clipped cosine, and their gradient (the formulas of
// fused._theta_activation) in one pass each.
//
// SphereTfAddPatchGradient: the layer's input gradient conv_grad + 2·x·spread
// (spread one value per input pixel), one pass instead of a multiply and an AddN.
//
// Built and loaded by sphere_tf/backends/tensorflow/kernels/build.py; CPU only, float32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/util/work_sharder.h"
#include "unsupported/Eigen/CXX11/Tensor"

using namespace tensorflow;  // NOLINT

REGISTER_OP("SphereTfTanhCosine")
    .Attr("squared: bool = false")
    .Input("dot: float")
    .Input("x_norm: float")
    .Input("factor: float")
    .Input("inv_radius: float")
    .Output("out: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("SphereTfTanhCosineGrad")
    .Attr("squared: bool = false")
    .Input("upstream: float")
    .Input("dot: float")
    .Input("x_norm: float")
    .Input("factor: float")
    .Input("inv_radius: float")
    .Output("d_dot: float")
    .Output("d_x_norm: float")
    .Output("d_factor: float")
    .Output("d_inv_radius: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      c->set_output(2, c->input(3));
      c->set_output(3, c->input(4));
      return absl::OkStatus();
    });

REGISTER_OP("SphereTfRescale")
    .Attr("squared: bool = false")
    .Input("dot: float")
    .Input("factor: float")
    .Output("out: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

REGISTER_OP("SphereTfRescaleGrad")
    .Attr("squared: bool = false")
    .Input("upstream: float")
    .Input("dot: float")
    .Input("factor: float")
    .Output("d_dot: float")
    .Output("d_factor: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(2));
      return absl::OkStatus();
    });

REGISTER_OP("SphereTfThetaActivation")
    .Attr("sigmoid: bool = false")
    .Attr("k: float = 0.3")
    .Attr("clip: float")
    .Input("dot: float")
    .Input("inv_norm: float")
    .Output("g: float")
    .Output("cosine: float")
    .Output("saved: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(0));
      c->set_output(2, c->UnknownShape());
      return absl::OkStatus();
    });

REGISTER_OP("SphereTfThetaActivationGrad")
    .Attr("sigmoid: bool = false")
    .Attr("k: float = 0.3")
    .Attr("outside: float")
    .Input("upstream: float")
    .Input("cosine: float")
    .Input("saved: float")
    .Input("inv_norm: float")
    .Output("d_dot: float")
    .Output("d_inv_norm: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(1));
      c->set_output(1, c->input(3));
      return absl::OkStatus();
    });

REGISTER_OP("SphereTfAddPatchGradient")
    .Input("conv_grad: float")
    .Input("x: float")
    .Input("spread: float")
    .Output("out: float")
    .SetShapeFn([](shape_inference::InferenceContext* c) {
      c->set_output(0, c->input(0));
      return absl::OkStatus();
    });

using Row = Eigen::Map<Eigen::ArrayXf>;
using ConstRow = Eigen::Map<const Eigen::ArrayXf>;

// The tail's operands dot (rows x units), x_norm and factor (one value per row)
// and inv_radius (units), read from inputs first .. first + 3.
struct TailOperands {
  const float *dot, *n, *v, *a;
  int64_t rows, units;
};

static absl::Status ReadTail(OpKernelContext* ctx, int first, TailOperands* t) {
  const Tensor& dot = ctx->input(first);
  const Tensor& x_norm = ctx->input(first + 1);
  const Tensor& factor = ctx->input(first + 2);
  const Tensor& inv_radius = ctx->input(first + 3);
  t->units = inv_radius.NumElements();
  t->rows = x_norm.NumElements();
  if (dot.NumElements() != t->rows * t->units || factor.NumElements() != t->rows) {
    return errors::InvalidArgument("dot must have rows x units elements and x_norm, factor one per row");
  }
  t->dot = dot.flat<float>().data();
  t->n = x_norm.flat<float>().data();
  t->v = factor.flat<float>().data();
  t->a = inv_radius.flat<float>().data();
  return absl::OkStatus();
}

class TanhCosineOp : public OpKernel {
 public:
  explicit TanhCosineOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("squared", &squared_));
  }
  void Compute(OpKernelContext* ctx) override {
    TailOperands t;
    OP_REQUIRES_OK(ctx, ReadTail(ctx, 0, &t));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, ctx->input(0).shape(), &out));
    float* o = out->flat<float>().data();
    const int64_t units = t.units;
    auto work = [&](int64_t begin, int64_t end) {
      ConstRow ar(t.a, units);
      Eigen::ArrayXf th(units);
      for (int64_t p = begin; p < end; ++p) {
        th = (ar * t.n[p]).tanh();
        ConstRow dr(t.dot + p * units, units);
        if (squared_) {
          Row(o + p * units, units) = dr * dr.abs() * th * t.v[p];
        } else {
          Row(o + p * units, units) = dr * th * t.v[p];
        }
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    Shard(pool->num_threads, pool->workers, t.rows, units * 30, work);
  }

 private:
  bool squared_;
};

class TanhCosineGradOp : public OpKernel {
 public:
  explicit TanhCosineGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("squared", &squared_));
  }
  void Compute(OpKernelContext* ctx) override {
    TailOperands t;
    OP_REQUIRES_OK(ctx, ReadTail(ctx, 1, &t));
    const Tensor& up = ctx->input(0);
    OP_REQUIRES(ctx, up.NumElements() == ctx->input(1).NumElements(),
                errors::InvalidArgument("upstream and dot must have the same size"));
    const int64_t units = t.units, rows = t.rows;
    // Outputs: ∂L/∂dot, ∂L/∂x_norm, ∂L/∂factor, ∂L/∂inv_radius, shaped like inputs 1..4.
    Tensor* grads[4];
    for (int i = 0; i < 4; ++i) {
      OP_REQUIRES_OK(ctx, ctx->allocate_output(i, ctx->input(i + 1).shape(), &grads[i]));
    }
    const float* g = up.flat<float>().data();
    const float *d = t.dot, *n = t.n, *v = t.v, *a = t.a;
    float* dd = grads[0]->flat<float>().data();
    float* dn = grads[1]->flat<float>().data();
    float* dv = grads[2]->flat<float>().data();
    // Fixed blocks of rows, one partial (units,) sum each: deterministic whatever the threads.
    const int64_t block = 256;
    const int64_t blocks = (rows + block - 1) / block;
    std::vector<float> partial(blocks * units, 0.0f);
    auto work = [&](int64_t b_begin, int64_t b_end) {
      ConstRow ar(a, units);
      Eigen::ArrayXf t(units), q(units), r(units);
      for (int64_t b = b_begin; b < b_end; ++b) {
        Row acc(partial.data() + b * units, units);
        const int64_t end = std::min(rows, (b + 1) * block);
        for (int64_t p = b * block; p < end; ++p) {
          ConstRow gr(g + p * units, units), dr(d + p * units, units);
          t = (ar * n[p]).tanh();
          if (squared_) {  // u = dot·|dot|, du/ddot = 2|dot|
            q = gr * dr * dr.abs();
            Row(dd + p * units, units) = gr * t * (2.0f * v[p]) * dr.abs();
          } else {  // u = dot
            q = gr * dr;
            Row(dd + p * units, units) = gr * t * v[p];
          }
          r = q * (1.0f - t * t);
          dn[p] = v[p] * (r * ar).sum();
          dv[p] = (q * t).sum();
          acc += r * (v[p] * n[p]);
        }
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    Shard(pool->num_threads, pool->workers, blocks, block * units * 40, work);
    float* da = grads[3]->flat<float>().data();
    Row total(da, units);
    total.setZero();
    for (int64_t b = 0; b < blocks; ++b) total += Row(partial.data() + b * units, units);
  }

 private:
  bool squared_;
};

// f = u·v with u = dot (cosine) or dot·|dot| (square cosine) and v one value per row.
class RescaleOp : public OpKernel {
 public:
  explicit RescaleOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("squared", &squared_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dot = ctx->input(0);
    const Tensor& factor = ctx->input(1);
    const int64_t rows = factor.NumElements();
    OP_REQUIRES(ctx, (rows > 0 ? dot.NumElements() % rows == 0 : dot.NumElements() == 0),
                errors::InvalidArgument("factor must have one value per row of dot"));
    const int64_t units = rows > 0 ? dot.NumElements() / rows : 0;  // an empty batch: no rows
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, dot.shape(), &out));
    const float* d = dot.flat<float>().data();
    const float* v = factor.flat<float>().data();
    float* o = out->flat<float>().data();
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        ConstRow dr(d + p * units, units);
        if (squared_) {
          Row(o + p * units, units) = dr * dr.abs() * v[p];
        } else {
          Row(o + p * units, units) = dr * v[p];
        }
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    Shard(pool->num_threads, pool->workers, rows, units * 3, work);
  }

 private:
  bool squared_;
};

// ∂L/∂dot = G·v·du/ddot and ∂L/∂v = Σ_j G·u in one pass.
class RescaleGradOp : public OpKernel {
 public:
  explicit RescaleGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("squared", &squared_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& up = ctx->input(0);
    const Tensor& dot = ctx->input(1);
    const Tensor& factor = ctx->input(2);
    const int64_t rows = factor.NumElements();
    OP_REQUIRES(ctx, up.NumElements() == dot.NumElements(),
                errors::InvalidArgument("upstream and dot must have the same size"));
    OP_REQUIRES(ctx, (rows > 0 ? dot.NumElements() % rows == 0 : dot.NumElements() == 0),
                errors::InvalidArgument("factor must have one value per row of dot"));
    const int64_t units = rows > 0 ? dot.NumElements() / rows : 0;  // an empty batch: no rows
    Tensor *d_dot = nullptr, *d_v = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, dot.shape(), &d_dot));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, factor.shape(), &d_v));
    const float* g = up.flat<float>().data();
    const float* d = dot.flat<float>().data();
    const float* v = factor.flat<float>().data();
    float* dd = d_dot->flat<float>().data();
    float* dv = d_v->flat<float>().data();
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        ConstRow gr(g + p * units, units), dr(d + p * units, units);
        if (squared_) {
          Row(dd + p * units, units) = gr * dr.abs() * (2.0f * v[p]);
          dv[p] = (gr * dr * dr.abs()).sum();
        } else {
          Row(dd + p * units, units) = gr * v[p];
          dv[p] = (gr * dr).sum();
        }
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    Shard(pool->num_threads, pool->workers, rows, units * 5, work);
  }

 private:
  bool squared_;
};

class AddPatchGradientOp : public OpKernel {
 public:
  explicit AddPatchGradientOp(OpKernelConstruction* ctx) : OpKernel(ctx) {}
  void Compute(OpKernelContext* ctx) override {
    const Tensor& conv_grad = ctx->input(0);
    const Tensor& x = ctx->input(1);
    const Tensor& spread = ctx->input(2);
    const int64_t rows = spread.NumElements();
    OP_REQUIRES(ctx, x.NumElements() == conv_grad.NumElements(),
                errors::InvalidArgument("x and conv_grad must have the same size"));
    OP_REQUIRES(ctx, (rows > 0 ? x.NumElements() % rows == 0 : x.NumElements() == 0),
                errors::InvalidArgument("spread must have one value per row of x"));
    const int64_t channels = rows > 0 ? x.NumElements() / rows : 0;  // an empty batch: no rows
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->forward_input_or_allocate_output({0}, 0, conv_grad.shape(), &out));
    const float* g = conv_grad.flat<float>().data();
    const float* xs = x.flat<float>().data();
    const float* s = spread.flat<float>().data();
    float* o = out->flat<float>().data();
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        Row(o + p * channels, channels) =
            ConstRow(g + p * channels, channels) + ConstRow(xs + p * channels, channels) * (2.0f * s[p]);
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    Shard(pool->num_threads, pool->workers, rows, channels * 3, work);
  }
};

// g(θ) from c = clip(dot·(1/‖x‖), ±clip): linear (2/π)·arcsin c, or sigmoid
// tanh(arcsin(c)/2k)/tanh(π/4k) whose tanh(arcsin(c)/2k) is also returned for the
// backward pass (an empty `saved` for linear).
class ThetaActivationOp : public OpKernel {
 public:
  explicit ThetaActivationOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("sigmoid", &sigmoid_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("k", &k_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("clip", &clip_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& dot = ctx->input(0);
    const Tensor& inv = ctx->input(1);
    const int64_t rows = inv.NumElements();
    OP_REQUIRES(ctx, (rows > 0 ? dot.NumElements() % rows == 0 : dot.NumElements() == 0),
                errors::InvalidArgument("inv_norm must have one value per row of dot"));
    const int64_t units = rows > 0 ? dot.NumElements() / rows : 0;  // an empty batch: no rows
    Tensor *g = nullptr, *c = nullptr, *saved = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, dot.shape(), &g));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, dot.shape(), &c));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, sigmoid_ ? dot.shape() : TensorShape({0}), &saved));
    const float* d = dot.flat<float>().data();
    const float* iv = inv.flat<float>().data();
    float* go = g->flat<float>().data();
    float* co = c->flat<float>().data();
    float* so = sigmoid_ ? saved->flat<float>().data() : nullptr;
    const float half_over_k = 0.5f / k_;
    const float inv_t = 1.0f / std::tanh(static_cast<float>(M_PI) / (4.0f * k_));
    const float two_over_pi = 2.0f / static_cast<float>(M_PI);
    auto work = [&](int64_t begin, int64_t end) {
      for (int64_t p = begin; p < end; ++p) {
        Row cr(co + p * units, units);
        cr = (ConstRow(d + p * units, units) * iv[p]).max(-clip_).min(clip_);
        if (sigmoid_) {
          Row sr(so + p * units, units);
          sr = (cr.asin() * half_over_k).tanh();
          Row(go + p * units, units) = sr * inv_t;
        } else {
          Row(go + p * units, units) = cr.asin() * two_over_pi;
        }
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    Shard(pool->num_threads, pool->workers, rows, units * 40, work);
  }

 private:
  bool sigmoid_;
  float k_, clip_;
};

// ∂L/∂dot = G·g'(c)·(1/‖x‖) and ∂L/∂(1/‖x‖) = ‖x‖·Σ_j G·g'(c)·c, zero where the clip
// changed c (1 − c² ≤ outside): the clip's own gradient.
class ThetaActivationGradOp : public OpKernel {
 public:
  explicit ThetaActivationGradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("sigmoid", &sigmoid_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("k", &k_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("outside", &outside_));
  }
  void Compute(OpKernelContext* ctx) override {
    const Tensor& up = ctx->input(0);
    const Tensor& c = ctx->input(1);
    const Tensor& saved = ctx->input(2);
    const Tensor& inv = ctx->input(3);
    const int64_t rows = inv.NumElements();
    OP_REQUIRES(ctx, up.NumElements() == c.NumElements() &&
                     (rows > 0 ? c.NumElements() % rows == 0 : c.NumElements() == 0),
                errors::InvalidArgument("upstream and cosine must match, inv_norm one value per row"));
    OP_REQUIRES(ctx, !sigmoid_ || saved.NumElements() == c.NumElements(),
                errors::InvalidArgument("sigmoid needs the saved tanh of the forward pass"));
    const int64_t units = rows > 0 ? c.NumElements() / rows : 0;  // an empty batch: no rows
    Tensor *d_dot = nullptr, *d_inv = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, c.shape(), &d_dot));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, inv.shape(), &d_inv));
    const float* g = up.flat<float>().data();
    const float* cs = c.flat<float>().data();
    const float* ss = sigmoid_ ? saved.flat<float>().data() : nullptr;
    const float* iv = inv.flat<float>().data();
    float* dd = d_dot->flat<float>().data();
    float* di = d_inv->flat<float>().data();
    const float t = std::tanh(static_cast<float>(M_PI) / (4.0f * k_));
    const float constant = sigmoid_ ? 1.0f / (2.0f * k_ * t) : 2.0f / static_cast<float>(M_PI);
    auto work = [&](int64_t begin, int64_t end) {
      Eigen::ArrayXf om(units), dg(units);
      for (int64_t p = begin; p < end; ++p) {
        ConstRow gr(g + p * units, units), cr(cs + p * units, units);
        om = 1.0f - cr * cr;
        dg = (om > outside_).select(gr * om.rsqrt(), 0.0f);
        if (sigmoid_) {
          ConstRow sr(ss + p * units, units);
          dg *= 1.0f - sr * sr;
        }
        Row(dd + p * units, units) = dg * (constant * iv[p]);
        di[p] = (constant / iv[p]) * (dg * cr).sum();
      }
    };
    auto* pool = ctx->device()->tensorflow_cpu_worker_threads();
    Shard(pool->num_threads, pool->workers, rows, units * 15, work);
  }

 private:
  bool sigmoid_;
  float k_, outside_;
};

REGISTER_KERNEL_BUILDER(Name("SphereTfThetaActivation").Device(DEVICE_CPU), ThetaActivationOp);
REGISTER_KERNEL_BUILDER(Name("SphereTfThetaActivationGrad").Device(DEVICE_CPU), ThetaActivationGradOp);
REGISTER_KERNEL_BUILDER(Name("SphereTfTanhCosine").Device(DEVICE_CPU), TanhCosineOp);
REGISTER_KERNEL_BUILDER(Name("SphereTfAddPatchGradient").Device(DEVICE_CPU), AddPatchGradientOp);
REGISTER_KERNEL_BUILDER(Name("SphereTfRescale").Device(DEVICE_CPU), RescaleOp);
REGISTER_KERNEL_BUILDER(Name("SphereTfRescaleGrad").Device(DEVICE_CPU), RescaleGradOp);
REGISTER_KERNEL_BUILDER(Name("SphereTfTanhCosineGrad").Device(DEVICE_CPU), TanhCosineGradOp);
