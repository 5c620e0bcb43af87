// The elementwise passes of the fused cells, one loop each instead of a dozen PyTorch ops: for the
// frozen cell (nas/fast/frozen_loop.py) the highway with its activations and its derivatives, and
// its whole time loop; for the search cell (nas/fast/search_loop.py) a node mixing every op over all
// its edges, its derivatives with the mixing weights' gradient, and BatchNorm's normalisation and
// its derivative. Built by setup.py when torch is importable at build time; without them the cells
// run their definition through autograd.
//
// Frozen-cell tensors are (D, E, n, K) views with a contiguous last dimension: directions, edges,
// rows, and H (or 2H for [c | h]); `prev` may repeat along E (stride 0). `codes` holds each edge's
// activation: 0 identity, 1 tanh, 2 relu, 3 sigmoid (nas/fast/kernels.py: OP_CODES).
#if defined(__AVX512F__)
#define CPU_CAPABILITY_AVX512
#define CPU_CAPABILITY AVX512
#elif defined(__AVX2__) && defined(__FMA__)
#define CPU_CAPABILITY_AVX2
#define CPU_CAPABILITY AVX2
#else
#define CPU_CAPABILITY DEFAULT
#endif
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/extension.h>

#include <algorithm>
#include <array>
#include <optional>
#include <tuple>
#include <vector>

namespace {

using at::vec::Vectorized;

enum Op : int64_t { IDENTITY = 0, TANH = 1, RELU = 2, SIGMOID = 3 };

// exp_u20 is ATen's fast exp (20 ulp), the one torch.sigmoid uses on this CPU.
template <typename T>
inline Vectorized<T> sigmoid(Vectorized<T> x) {
  const Vectorized<T> one(1);
  return one / (one + x.neg().exp_u20());
}

// tanh x = -expm1(-2|x|) / (2 + expm1(-2|x|)), sign of x: accurate near 0 and free of overflow, and
// about three times as fast here as Sleef's tanh (which torch.tanh runs).
template <typename T>
inline Vectorized<T> tanh(Vectorized<T> x) {
  using V = Vectorized<T>;
  const V e = (x.abs() * V(-2)).expm1(), t = e.neg() / (e + V(2));
  return V::blendv(t, t.neg(), x < V(0));
}

template <typename T, int OP>
inline Vectorized<T> activation(Vectorized<T> h) {
  if constexpr (OP == TANH) return tanh(h);
  else if constexpr (OP == RELU) return at::vec::clamp_min(h, Vectorized<T>(0));
  else if constexpr (OP == SIGMOID) return sigmoid(h);
  else return h;
}

template <typename T, int OP>  // f'(h), written through a = f(h)
inline Vectorized<T> activation_grad(Vectorized<T> a) {
  using V = Vectorized<T>;
  if constexpr (OP == TANH) return V(1) - a * a;
  else if constexpr (OP == RELU) return V::blendv(V(0), V(1), a > V(0));
  else if constexpr (OP == SIGMOID) return a - a * a;
  else return V(1);
}

// One row: c, h (H each) become sigmoid(c), f(h); out = p + sigmoid(c) (f(h) - p).
template <typename T, int OP>
void forward_row(T* c, T* h, const T* p, T* out, int64_t H) {
  using V = Vectorized<T>;
  for (int64_t j = 0; j < H; j += V::size()) {
    const int64_t k = std::min<int64_t>(V::size(), H - j);
    const V s = sigmoid(V::loadu(c + j, k)), a = activation<T, OP>(V::loadu(h + j, k)), pv = V::loadu(p + j, k);
    s.store(c + j, k);
    a.store(h + j, k);
    (pv + s * (a - pv)).store(out + j, k);
  }
}

// One row: from grad = d out and s = sigmoid(c), a = f(h): dc, dh, and direct = grad (1 - s).
template <typename T, int OP>
void backward_row(const T* grad, const T* p, const T* s, const T* a, T* dc, T* dh, T* direct, int64_t H) {
  using V = Vectorized<T>;
  for (int64_t j = 0; j < H; j += V::size()) {
    const int64_t k = std::min<int64_t>(V::size(), H - j);
    const V g = V::loadu(grad + j, k), pv = V::loadu(p + j, k), sv = V::loadu(s + j, k), av = V::loadu(a + j, k);
    const V ga = g * sv;
    (g * (av - pv) * (sv - sv * sv)).store(dc + j, k);
    (ga * activation_grad<T, OP>(av)).store(dh + j, k);
    (g - ga).store(direct + j, k);
  }
}

void check(const at::Tensor& t, const at::Tensor& like, int64_t last, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 4 && t.scalar_type() == like.scalar_type(), name,
              ": a 4-d CPU tensor of the cell's dtype");
  TORCH_CHECK(t.size(0) == like.size(0) && t.size(1) == like.size(1) && t.size(2) == like.size(2) &&
                  t.size(3) == last && t.stride(3) == 1,
              name, ": shape (D, E, n, ", last, ") with a contiguous last dimension");
}

template <typename T>
T* at_row(const at::Tensor& t, int64_t d, int64_t e, int64_t r) {
  return t.data_ptr<T>() + d * t.stride(0) + e * t.stride(1) + r * t.stride(2);
}

// Runs body(d, e, r, op) over every row, in parallel over rows as PyTorch's own elementwise ops do.
template <typename F>
void for_rows(const at::Tensor& act, const std::vector<int64_t>& codes, F body) {
  const int64_t D = act.size(0), E = act.size(1), n = act.size(2);
  TORCH_CHECK(static_cast<int64_t>(codes.size()) == E, "one activation code per edge");
  const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / std::max<int64_t>(1, act.size(3)));
  at::parallel_for(0, D * E * n, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t r = i % n, e = (i / n) % E, d = i / (n * E);
      body(d, e, r, codes[e]);
    }
  });
}

void highway_forward(at::Tensor act, const at::Tensor& prev, const std::vector<int64_t>& codes, at::Tensor out) {
  const int64_t H = prev.size(3);
  check(act, act, 2 * H, "act");
  check(prev, act, H, "prev");
  check(out, act, H, "out");
  AT_DISPATCH_FLOATING_TYPES(act.scalar_type(), "highway_forward", [&] {
    for_rows(act, codes, [&](int64_t d, int64_t e, int64_t r, int64_t op) {
      scalar_t* a = at_row<scalar_t>(act, d, e, r);
      const scalar_t* p = at_row<scalar_t>(prev, d, e, r);
      scalar_t* o = at_row<scalar_t>(out, d, e, r);
      switch (op) {
        case TANH: forward_row<scalar_t, TANH>(a, a + H, p, o, H); break;
        case RELU: forward_row<scalar_t, RELU>(a, a + H, p, o, H); break;
        case SIGMOID: forward_row<scalar_t, SIGMOID>(a, a + H, p, o, H); break;
        default: forward_row<scalar_t, IDENTITY>(a, a + H, p, o, H);
      }
    });
  });
}

void highway_backward(const at::Tensor& grad, const at::Tensor& prev, const at::Tensor& act,
                      const std::vector<int64_t>& codes, at::Tensor g, at::Tensor direct) {
  const int64_t H = prev.size(3);
  check(act, act, 2 * H, "act");
  check(grad, act, H, "grad");
  check(prev, act, H, "prev");
  check(g, act, 2 * H, "g");
  check(direct, act, H, "direct");
  AT_DISPATCH_FLOATING_TYPES(act.scalar_type(), "highway_backward", [&] {
    for_rows(act, codes, [&](int64_t d, int64_t e, int64_t r, int64_t op) {
      const scalar_t* gr = at_row<scalar_t>(grad, d, e, r);
      const scalar_t* p = at_row<scalar_t>(prev, d, e, r);
      const scalar_t* a = at_row<scalar_t>(act, d, e, r);
      scalar_t* gg = at_row<scalar_t>(g, d, e, r);
      scalar_t* di = at_row<scalar_t>(direct, d, e, r);
      switch (op) {
        case TANH: backward_row<scalar_t, TANH>(gr, p, a, a + H, gg, gg + H, di, H); break;
        case RELU: backward_row<scalar_t, RELU>(gr, p, a, a + H, gg, gg + H, di, H); break;
        case SIGMOID: backward_row<scalar_t, SIGMOID>(gr, p, a, a + H, gg, gg + H, di, H); break;
        default: backward_row<scalar_t, IDENTITY>(gr, p, a, a + H, gg, gg + H, di, H);
      }
    });
  });
}

// ---- The search cell (nas/fast/search_loop.py) ----------------------------------------------
// Node i reads k states S_j (k, n, H) through [c_j | h_j] = (S_j m_h) W_i (k, n, 2H) and mixes
// every op with weights w (k, 4: identity, tanh, relu, sigmoid), keep_j = sum_op w_j,op:
//   s = sum_j keep_j S_j + sigmoid(c_j) (sum_op w_j,op f_op(h_j) - keep_j S_j)
// Tensors have a contiguous last dimension; `act` keeps [sigmoid(c) | h] for the backward.

void check_rows(const at::Tensor& t, const at::Tensor& like, int64_t dims, int64_t last, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == dims && t.scalar_type() == like.scalar_type() && t.size(-1) == last &&
                  t.stride(-1) == 1,
              name, ": a ", dims, "-d CPU tensor of the cell's dtype, last dimension ", last, " and contiguous");
}

template <typename T>
T* row(const at::Tensor& t, int64_t j, int64_t r) {
  return t.data_ptr<T>() + j * t.stride(0) + r * t.stride(1);
}

template <typename T>
double lanes_sum(const Vectorized<T>& v) {
  T lanes[Vectorized<T>::size()];
  v.store(lanes);
  double sum = 0;
  for (int64_t l = 0; l < Vectorized<T>::size(); ++l) sum += lanes[l];
  return sum;
}

void mixed_node_forward(const at::Tensor& ch, const at::Tensor& states, const at::Tensor& w, at::Tensor act,
                        at::Tensor out) {
  const int64_t k = ch.size(0), n = ch.size(1), H = states.size(-1);
  check_rows(ch, ch, 3, 2 * H, "ch");
  check_rows(act, ch, 3, 2 * H, "act");
  check_rows(states, ch, 3, H, "states");
  check_rows(out, ch, 2, H, "out");
  TORCH_CHECK(states.size(0) == k && act.size(0) == k && w.is_contiguous() && w.size(0) == k && w.size(1) == 4 &&
                  w.scalar_type() == ch.scalar_type(),
              "w: (k, 4) contiguous, one row per edge");
  AT_DISPATCH_FLOATING_TYPES(ch.scalar_type(), "mixed_node_forward", [&] {
    using V = Vectorized<scalar_t>;
    const scalar_t* wp = w.data_ptr<scalar_t>();
    const int64_t grain = std::max<int64_t>(1, at::internal::GRAIN_SIZE / (k * H));
    at::parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
      // edge by edge, each row's sum kept in `out` (the same additions in the same order): three
      // streams of memory at a time rather than three per edge, which the prefetchers keep up with
      for (int64_t j = 0; j < k; ++j) {
        const scalar_t* wj = wp + 4 * j;
        const scalar_t keep = wj[0] + wj[1] + wj[2] + wj[3];
        for (int64_t r = begin; r < end; ++r) {
          scalar_t* o = out.data_ptr<scalar_t>() + r * out.stride(0);
          const scalar_t* cj = row<scalar_t>(ch, j, r);
          scalar_t* aj = row<scalar_t>(act, j, r);
          const scalar_t* sj = row<scalar_t>(states, j, r);
          for (int64_t x = 0; x < H; x += V::size()) {
            const int64_t m = std::min<int64_t>(V::size(), H - x);
            const V acc = j == 0 ? V(0) : V::loadu(o + x, m);
            const V sc = sigmoid(V::loadu(cj + x, m)), h = V::loadu(cj + H + x, m);
            const V s = V::loadu(sj + x, m);
            const V mix = V(wj[0]) * h + V(wj[1]) * tanh(h) + V(wj[2]) * at::vec::clamp_min(h, V(0)) +
                          V(wj[3]) * sigmoid(h);
            (acc + V(keep) * s + sc * (mix - V(keep) * s)).store(o + x, m);
            sc.store(aj + x, m);
            if (aj != cj) h.store(aj + H + x, m);
          }
        }
      }
    });
  });
}

// From grad = d s (n, H): g = [d c | d h] per edge (k, n, 2H); grad_states += the highway's
// direct part, grad keep_j (1 - sigmoid(c_j)); grad_w (k, 5, double) += per edge
// [sum g sigmoid(c) f_op(h) for the 4 ops, sum g (1 - sigmoid(c)) S], so that
// d w_j,op = grad_w[j, op] + grad_w[j, 4].
void mixed_node_backward(const at::Tensor& grad, const at::Tensor& act, const at::Tensor& states,
                         const at::Tensor& w, at::Tensor g, at::Tensor grad_states, at::Tensor grad_w) {
  const int64_t k = act.size(0), n = act.size(1), H = states.size(-1);
  check_rows(act, act, 3, 2 * H, "act");
  check_rows(g, act, 3, 2 * H, "g");
  check_rows(states, act, 3, H, "states");
  check_rows(grad_states, act, 3, H, "grad_states");
  check_rows(grad, act, 2, H, "grad");
  TORCH_CHECK(w.is_contiguous() && w.size(0) == k && w.size(1) == 4 && w.scalar_type() == act.scalar_type(),
              "w: (k, 4) contiguous, one row per edge");
  TORCH_CHECK(grad_w.is_contiguous() && grad_w.scalar_type() == at::kDouble && grad_w.size(0) == k &&
                  grad_w.size(1) == 5,
              "grad_w: (k, 5) contiguous double");
  AT_DISPATCH_FLOATING_TYPES(act.scalar_type(), "mixed_node_backward", [&] {
    using V = Vectorized<scalar_t>;
    const scalar_t* wp = w.data_ptr<scalar_t>();
    at::parallel_for(0, k, 1, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        const scalar_t* wj = wp + 4 * j;
        const scalar_t keep = wj[0] + wj[1] + wj[2] + wj[3];
        double sums[5] = {0, 0, 0, 0, 0};
        for (int64_t r = 0; r < n; ++r) {
          const scalar_t* gr = grad.data_ptr<scalar_t>() + r * grad.stride(0);
          const scalar_t* aj = row<scalar_t>(act, j, r);
          const scalar_t* sj = row<scalar_t>(states, j, r);
          scalar_t* gj = row<scalar_t>(g, j, r);
          scalar_t* dsj = row<scalar_t>(grad_states, j, r);
          V acc_id(0), acc_tanh(0), acc_relu(0), acc_sig(0), acc_keep(0);
          for (int64_t x = 0; x < H; x += V::size()) {
            const int64_t m = std::min<int64_t>(V::size(), H - x);
            const V d = V::loadu(gr + x, m), sc = V::loadu(aj + x, m), h = V::loadu(aj + H + x, m);
            const V s = V::loadu(sj + x, m);
            const V t = tanh(h), r_ = at::vec::clamp_min(h, V(0)), sg = sigmoid(h);
            const V mix = V(wj[0]) * h + V(wj[1]) * t + V(wj[2]) * r_ + V(wj[3]) * sg;
            const V ds = d * sc, direct = d - ds;
            (d * (mix - V(keep) * s) * (sc - sc * sc)).store(gj + x, m);
            const V slope = V(wj[0]) + V(wj[1]) * (V(1) - t * t) + V::blendv(V(0), V(wj[2]), h > V(0)) +
                            V(wj[3]) * (sg - sg * sg);
            (ds * slope).store(gj + H + x, m);
            (V::loadu(dsj + x, m) + V(keep) * direct).store(dsj + x, m);
            acc_id = acc_id + ds * h;
            acc_tanh = acc_tanh + ds * t;
            acc_relu = acc_relu + ds * r_;
            acc_sig = acc_sig + ds * sg;
            acc_keep = acc_keep + direct * s;
          }
          sums[0] += lanes_sum(acc_id);
          sums[1] += lanes_sum(acc_tanh);
          sums[2] += lanes_sum(acc_relu);
          sums[3] += lanes_sum(acc_sig);
          sums[4] += lanes_sum(acc_keep);
        }
        double* gw = grad_w.data_ptr<double>() + 5 * j;
        for (int64_t q = 0; q < 5; ++q) gw[q] += sums[q];
      }
    });
  });
}

// BatchNorm over the rows of x (n, H) with batch statistics, no affine: out = (x - mean) rstd,
// rstd = 1 / sqrt(var + eps), var the biased variance (two passes). mean, var, rstd: (H).
void batch_norm_forward(const at::Tensor& x, double eps, at::Tensor out, at::Tensor mean, at::Tensor var,
                        at::Tensor rstd) {
  const int64_t n = x.size(0), H = x.size(1);
  check_rows(x, x, 2, H, "x");
  check_rows(out, x, 2, H, "out");
  for (const at::Tensor* t : {&mean, &var, &rstd}) check_rows(*t, x, 1, H, "statistics");
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "batch_norm_forward", [&] {
    using V = Vectorized<scalar_t>;
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t xs = x.stride(0), os = out.stride(0);
    for (int64_t c = 0; c < H; c += V::size()) {
      const int64_t m = std::min<int64_t>(V::size(), H - c);
      V sum(0), sq(0);
      for (int64_t r = 0; r < n; ++r) sum = sum + V::loadu(xp + r * xs + c, m);
      const V mu = sum / V(static_cast<scalar_t>(n));
      for (int64_t r = 0; r < n; ++r) {
        const V d = V::loadu(xp + r * xs + c, m) - mu;
        sq = sq + d * d;
      }
      const V v = sq / V(static_cast<scalar_t>(n)), rs = (v + V(static_cast<scalar_t>(eps))).rsqrt();
      for (int64_t r = 0; r < n; ++r) ((V::loadu(xp + r * xs + c, m) - mu) * rs).store(op + r * os + c, m);
      mu.store(mean.data_ptr<scalar_t>() + c, m);
      v.store(var.data_ptr<scalar_t>() + c, m);
      rs.store(rstd.data_ptr<scalar_t>() + c, m);
    }
  });
}

// Its derivative through the normalised xhat: out = rstd (g - mean(g) - xhat mean(g xhat)).
void batch_norm_backward(const at::Tensor& grad, const at::Tensor& xhat, const at::Tensor& rstd, at::Tensor out) {
  const int64_t n = grad.size(0), H = grad.size(1);
  check_rows(grad, grad, 2, H, "grad");
  check_rows(xhat, grad, 2, H, "xhat");
  check_rows(out, grad, 2, H, "out");
  check_rows(rstd, grad, 1, H, "rstd");
  AT_DISPATCH_FLOATING_TYPES(grad.scalar_type(), "batch_norm_backward", [&] {
    using V = Vectorized<scalar_t>;
    const scalar_t *gp = grad.data_ptr<scalar_t>(), *xp = xhat.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t gs = grad.stride(0), xs = xhat.stride(0), os = out.stride(0);
    for (int64_t c = 0; c < H; c += V::size()) {
      const int64_t m = std::min<int64_t>(V::size(), H - c);
      V sum(0), dot(0);
      for (int64_t r = 0; r < n; ++r) {
        const V d = V::loadu(gp + r * gs + c, m);
        sum = sum + d;
        dot = dot + d * V::loadu(xp + r * xs + c, m);
      }
      const V inv(static_cast<scalar_t>(1.0 / n)), rs = V::loadu(rstd.data_ptr<scalar_t>() + c, m);
      const V mg = sum * inv, mgx = dot * inv;
      for (int64_t r = 0; r < n; ++r)
        ((V::loadu(gp + r * gs + c, m) - mg - V::loadu(xp + r * xs + c, m) * mgx) * rs).store(op + r * os + c, m);
    }
  });
}


// ---- The frozen cell's time loop (nas/fast/frozen_loop.py) -----------------------------------
// `frozen_forward_steps` and `frozen_backward_steps` are the time steps of nas/fast/frozen_loop.py's
// `FusedFrozenCell` (that file states the equations and the buffers' layout), run here so that the
// per-step bookkeeping (a few dozen views and small ops per step) costs no Python. Tensors keep the
// Function's shapes, with the directions D leading.

// Indices into one dimension, as `Pick` in frozen_loop.py: a view when evenly spaced, else a copy.
struct Pick {
  std::vector<int64_t> index;
  int64_t step = -1;  // -1: not evenly spaced
  bool distinct = true;
  at::Tensor tensor;

  explicit Pick(std::vector<int64_t> idx) : index(std::move(idx)) {
    if (index.size() == 1) {
      step = 1;
    } else {
      step = index[1] - index[0];
      for (size_t i = 2; i < index.size(); ++i)
        if (index[i] - index[i - 1] != step) step = -1;
      if (step < 0) step = -1;
    }
    std::vector<int64_t> sorted = index;
    std::sort(sorted.begin(), sorted.end());
    distinct = std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
    tensor = at::tensor(index, at::kLong);
  }

  int64_t size() const { return static_cast<int64_t>(index.size()); }

  at::Tensor take(const at::Tensor& t, int64_t dim) const {
    if (step < 0) return t.index_select(dim, tensor);
    if (step == 0) {
      std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
      shape[dim] = size();
      return t.narrow(dim, index[0], 1).expand(shape);
    }
    return t.slice(dim, index[0], index[0] + (size() - 1) * step + 1, step);
  }

  void add(at::Tensor& t, int64_t dim, const at::Tensor& src) const {
    if (step == 0) t.narrow(dim, index[0], 1).add_(src.sum(dim, true));
    else if (step > 0) take(t, dim).add_(src);
    else t.index_add_(dim, tensor, src);
  }

  void put(at::Tensor& t, int64_t dim, const at::Tensor& src) const {
    if (distinct && step > 0) take(t, dim).copy_(src);
    else if (distinct) t.index_copy_(dim, tensor, src);
    else add(t, dim, src);
  }
};

// x · wᵀ on oneDNN's matmul, as `nas.fast.gemm.product` calls it: w plain or packed in oneDNN's blocked
// layout (`nas.fast.gemm.pack`), x as it is (a transposed x is read in place). The op is looked up at the
// first call: a torch built without oneDNN lacks it, and the callers then never get here.
at::Tensor linear_pointwise(const at::Tensor& x, const at::Tensor& w) {
  static const auto op = c10::Dispatcher::singleton().findSchemaOrThrow("mkldnn::_linear_pointwise", "");
  torch::jit::Stack stack{x, w, c10::IValue(), std::string("none"), c10::List<std::optional<at::Scalar>>(),
                          std::string("")};
  op.callBoxed(&stack);
  return stack[0].toTensor();
}

// The same on a packed weight, which oneDNN multiplies with a contiguous x only.
at::Tensor onednn_linear(const at::Tensor& x, const at::Tensor& packed) {
  return linear_pointwise(x.is_contiguous() ? x : x.contiguous(), packed);
}

// out (=, or += with accumulate) x (n, K) · W (N, K)ᵀ: on oneDNN with W packed (`blocked`) where x has at
// least `min_rows` rows, else on torch.mm with W as it is (`plain`): `nas.fast.gemm.LoopWeight`.
struct LoopWeight {
  at::Tensor plain, blocked;
  int64_t min_rows;
};

// `nas.fast.gemm.LoopWeight` as Python passes it: plain, blocked (None where not packed), min_rows.
using PyLoopWeight = std::tuple<at::Tensor, std::optional<at::Tensor>, int64_t>;

LoopWeight loop_weight(const PyLoopWeight& given) {
  const auto& [plain, blocked, min_rows] = given;
  return {plain, blocked.value_or(plain), min_rows};
}

// x (n, K) · W (N, K)ᵀ as a new tensor, on the backend `product_into` would use.
at::Tensor loop_product(const at::Tensor& x, const LoopWeight& w) {
  return x.size(0) >= w.min_rows ? onednn_linear(x, w.blocked) : at::mm(x, w.plain.t());
}

void product_into(const at::Tensor& x, const LoopWeight& w, at::Tensor out, bool accumulate) {
  if (x.size(0) >= w.min_rows) {
    const at::Tensor r = onednn_linear(x, w.blocked);
    accumulate ? out.add_(r) : out.copy_(r);
  } else if (accumulate) {
    at::addmm_out(out, out, x, w.plain.t());
  } else {
    at::mm_out(out, x, w.plain.t());
  }
}

// A genotype's waves as `Plan` holds them (frozen_loop.plan), built once per plan.
struct Wave {
  int64_t edge_start, edge_stop;
  Pick nodes, preds;
  std::vector<int64_t> codes;
  std::vector<std::array<int64_t, 4>> groups;  // edge_start, edge_stop, X slot, S slot of the predecessor
  std::vector<bool> first;                      // the group's GEMM adds to the input projection (wave 0)
};

struct FrozenPlan {
  std::vector<Wave> waves;
  Pick concat;
  int64_t max_edges = 0;
};

FrozenPlan make_plan(const std::vector<std::vector<int64_t>>& waves, const std::vector<std::vector<int64_t>>& nodes,
                     const std::vector<std::vector<int64_t>>& preds, const std::vector<std::vector<int64_t>>& codes,
                     const std::vector<std::vector<int64_t>>& groups, const std::vector<int64_t>& concat) {
  FrozenPlan plan{{}, Pick(concat)};
  for (size_t w = 0; w < waves.size(); ++w) {
    plan.waves.push_back(Wave{waves[w][0], waves[w][1], Pick(nodes[w]), Pick(preds[w]), codes[w], {}, {}});
    plan.max_edges = std::max(plan.max_edges, waves[w][1] - waves[w][0]);
  }
  for (const auto& g : groups) {  // wave, edge_start, edge_stop, X slot, S slot, adds to the input projection
    plan.waves[g[0]].groups.push_back({g[1], g[2], g[3], g[4]});
    plan.waves[g[0]].first.push_back(g[5] != 0);
  }
  return plan;
}

using GroupWeights = std::vector<std::vector<LoopWeight>>;  // per wave's group in order, per direction
using PyLoopWeights = std::vector<std::vector<PyLoopWeight>>;

GroupWeights group_weights(const PyLoopWeights& given) {
  GroupWeights weights(given.size());
  for (size_t g = 0; g < given.size(); ++g)
    for (const PyLoopWeight& w : given[g]) weights[g].push_back(loop_weight(w));
  return weights;
}

// One direction's steps: its tensors are sliced to it (a leading dimension of 1, as the Python steps
// see one direction on a CPU) and its weights are [g][dir].
void forward_steps(const FrozenPlan& plan, const std::vector<int64_t>& counts, at::Tensor h,
                   const std::optional<at::Tensor>& mh, const GroupWeights& weights,
                   const std::optional<at::Tensor>& X, at::Tensor A, at::Tensor S, at::Tensor out, int64_t dir) {
  at::NoGradGuard no_grad;
  int64_t start = 0;
  for (const int64_t n : counts) {
    at::Tensor states = S.slice(2, start, start + n);
    states.select(1, 0).copy_(h.slice(1, 0, n));
    at::Tensor A_rows = A.slice(1, start, start + n);
    size_t g_index = 0;
    for (const Wave& wave : plan.waves) {
      for (size_t g = 0; g < wave.groups.size(); ++g, ++g_index) {
        const auto& group = wave.groups[g];
        const at::Tensor prev = states.select(1, group[3]);
        at::Tensor xs = prev;
        if (X) {
          xs = X->slice(1, start, start + n).select(2, group[2]);
          mh ? at::mul_out(xs, prev, mh->slice(1, 0, n)) : xs.copy_(prev);
        }
        product_into(xs[0], weights[g_index][dir],
                     A_rows[0].slice(1, group[0], group[1]).flatten(-2), wave.first[g]);
      }
      const at::Tensor act = A_rows.slice(2, wave.edge_start, wave.edge_stop).transpose(1, 2);
      const at::Tensor prev = wave.preds.take(states, 1);
      if (wave.nodes.step > 0 && wave.nodes.distinct) {
        highway_forward(act, prev, wave.codes, wave.nodes.take(states, 1));
      } else {
        at::Tensor fresh = at::empty_like(prev);
        highway_forward(act, prev, wave.codes, fresh);
        wave.nodes.put(states, 1, fresh);
      }
    }
    h = out.slice(1, start, start + n);
    at::mean_out(h, plan.concat.take(states, 1), {1});
    start += n;
  }
}

at::Tensor backward_steps(const FrozenPlan& plan, const std::vector<int64_t>& counts, const at::Tensor& grad_out,
                          const std::optional<at::Tensor>& mh, const GroupWeights& weights,
                          const at::Tensor& A, const at::Tensor& S, at::Tensor G, int64_t dir) {
  at::NoGradGuard no_grad;
  const int64_t R = S.size(2), H = S.size(3), B = counts[0];
  const double scale = 1.0 / static_cast<double>(plan.concat.size());
  at::Tensor grad_states = at::empty({1, S.size(1), B, H}, grad_out.options());
  at::Tensor grad_prevs = at::empty({1, plan.max_edges, B, H}, grad_out.options());
  at::Tensor through = at::empty({B, H}, grad_out.options());
  at::Tensor carry;
  int64_t end = R;
  size_t groups = 0;
  for (const Wave& wave : plan.waves) groups += wave.groups.size();
  for (auto it = counts.rbegin(); it != counts.rend(); ++it) {
    const int64_t n = *it, start = end - n;
    end = start;
    at::Tensor grad_h = grad_out.slice(1, start, start + n) * scale;
    if (carry.defined()) grad_h.slice(1, 0, carry.size(1)).add_(carry, scale);
    at::Tensor grad_s = grad_states.slice(2, 0, n).zero_();
    plan.concat.put(grad_s, 1, grad_h.unsqueeze(1).expand({1, plan.concat.size(), n, H}));
    const at::Tensor states = S.slice(2, start, start + n);
    const at::Tensor A_rows = A.slice(1, start, start + n);
    at::Tensor G_rows = G.slice(1, start, start + n);
    size_t g_index = groups;
    for (auto w = plan.waves.rbegin(); w != plan.waves.rend(); ++w) {
      const Wave& wave = *w;
      g_index -= wave.groups.size();
      const int64_t E = wave.edge_stop - wave.edge_start;
      at::Tensor grad_prev = grad_prevs.slice(1, 0, E).slice(2, 0, n);
      highway_backward(wave.nodes.take(grad_s, 1), wave.preds.take(states, 1),
                       A_rows.slice(2, wave.edge_start, wave.edge_stop).transpose(1, 2), wave.codes,
                       G_rows.slice(2, wave.edge_start, wave.edge_stop).transpose(1, 2), grad_prev);
      wave.preds.add(grad_s, 1, grad_prev);
      for (size_t g = 0; g < wave.groups.size(); ++g) {  // through the group's GEMM, masked
        const auto& group = wave.groups[g];
        at::Tensor thr = through.slice(0, 0, n);
        product_into(G_rows[0].slice(1, group[0], group[1]).flatten(-2), weights[g_index + g][dir], thr, false);
        at::Tensor target = grad_s[0].select(0, group[3]);
        mh ? target.addcmul_(thr, (*mh)[0].slice(0, 0, n)) : target.add_(thr);
      }
    }
    carry = grad_s.select(1, 0).clone();
  }
  return carry;
}

// The directions run concurrently when torch has more than one thread (one each; the products and
// kernels inside then run single-threaded, as ATen does in a parallel region), else one after the
// other, so that each one's weights stay in cache from step to step.
template <typename F>
void for_directions(int64_t D, F body) {
  const at::ThreadLocalState state;  // grad and inference mode, for the worker threads
  at::parallel_for(0, D, 1, [&](int64_t begin, int64_t end) {
    at::ThreadLocalStateGuard guard(state);
    for (int64_t d = begin; d < end; ++d) body(d);
  });
}

std::optional<at::Tensor> direction(const std::optional<at::Tensor>& t, int64_t d) {
  return t ? std::optional<at::Tensor>(t->slice(0, d, d + 1)) : std::nullopt;
}

void frozen_forward_steps(const FrozenPlan& plan, const std::vector<int64_t>& counts, const at::Tensor& h,
                          const std::optional<at::Tensor>& mh, const PyLoopWeights& loop_weights,
                          const std::optional<at::Tensor>& X, const at::Tensor& A, const at::Tensor& S,
                          const at::Tensor& out) {
  const GroupWeights weights = group_weights(loop_weights);
  for_directions(A.size(0), [&](int64_t d) {
    forward_steps(plan, counts, h.slice(0, d, d + 1), direction(mh, d), weights, direction(X, d),
                  A.slice(0, d, d + 1), S.slice(0, d, d + 1), out.slice(0, d, d + 1), d);
  });
}

at::Tensor frozen_backward_steps(const FrozenPlan& plan, const std::vector<int64_t>& counts, const at::Tensor& grad_out,
                                 const std::optional<at::Tensor>& mh, const PyLoopWeights& loop_weights,
                                 const at::Tensor& A, const at::Tensor& S, const at::Tensor& G) {
  const GroupWeights weights = group_weights(loop_weights);
  std::vector<at::Tensor> carries(A.size(0));
  for_directions(A.size(0), [&](int64_t d) {
    carries[d] = backward_steps(plan, counts, grad_out.slice(0, d, d + 1), direction(mh, d), weights,
                                A.slice(0, d, d + 1), S.slice(0, d, d + 1), G.slice(0, d, d + 1), d);
  });
  return at::cat(carries, 0);
}

// ---- The search cell's time loop (nas/fast/search_loop.py) -------------------------------------
// `search_forward_steps` and `search_backward_steps` are the loops of `FusedSearchCell.forward` and
// `.backward` (that file states the equations and what is kept), run here so that the few dozen
// views and small calls per step and node cost no Python. Tensors keep that file's shapes.

// The weights multiplied at every step come as `nas.fast.gemm.LoopWeight`s (`search_loop._native`).
std::vector<LoopWeight> loop_weights(const std::vector<PyLoopWeight>& given) {
  std::vector<LoopWeight> weights;
  for (const PyLoopWeight& w : given) weights.push_back(loop_weight(w));
  return weights;
}

// Runs the forward's steps into A0, S, means, variances, rstd and out; returns each step's and node's
// [sigmoid(c) | h] of its edges (the product's output, sigmoid(c) written over c), step-major.
std::vector<at::Tensor> search_forward_steps(const at::Tensor& xproj, const at::Tensor& h0, const at::Tensor& mix,
                                             const std::optional<at::Tensor>& mh, const PyLoopWeight& w0h_given,
                                             const std::vector<PyLoopWeight>& ws_given, double eps, at::Tensor A0,
                                             at::Tensor S, at::Tensor means, at::Tensor variances, at::Tensor rstd,
                                             at::Tensor out) {
  at::NoGradGuard no_grad;
  const LoopWeight w0h = loop_weight(w0h_given);
  const std::vector<LoopWeight> ws = loop_weights(ws_given);
  const int64_t T = xproj.size(0), B = xproj.size(1), H = xproj.size(2) / 2, N = ws.size();
  const std::vector<int64_t> first{TANH};  // s0's edge
  at::Tensor pre = at::empty({B, H}, xproj.options());
  at::Tensor masked = mh ? at::empty({N, B, H}, xproj.options()) : at::Tensor();  // this step's S_j m_h
  std::vector<at::Tensor> acts;
  acts.reserve(T * N);
  at::Tensor h = h0;
  for (int64_t t = 0; t < T; ++t) {
    const at::Tensor St = S[t];
    at::Tensor a0 = A0[t];
    at::add_out(a0, xproj[t], loop_product(mh ? h * *mh : h, w0h));
    highway_forward(a0.view({1, 1, B, 2 * H}), h.view({1, 1, B, H}), first, pre.view({1, 1, B, H}));
    batch_norm_forward(pre, eps, St[0], means[t][0], variances[t][0], rstd[t][0]);
    for (int64_t i = 0, off = 0; i < N; off += ++i) {
      const int64_t k = i + 1;
      const at::Tensor states = St.slice(0, 0, k);
      if (mh) {  // S_i is final from here on
        at::Tensor mi = masked[i];
        at::mul_out(mi, St[i], *mh);
      }
      const at::Tensor x = mh ? masked.slice(0, 0, k) : states;
      at::Tensor ch = loop_product(x.view({k * B, H}), ws[i]).view({k, B, 2 * H});
      mixed_node_forward(ch, states, mix.slice(0, off, off + k), ch, pre);
      acts.push_back(ch);
      batch_norm_forward(pre, eps, St[k], means[t][k], variances[t][k], rstd[t][k]);
    }
    h = out[t];
    at::mean_out(h, St.slice(0, 1, N + 1), {0});
  }
  return acts;
}

// The backward's steps: G0 (the input projection's gradient), grad_mix (edges x 5, double, as
// mixed_node_backward sums it) and grad_ws (when given, += each step's product) filled; returns dh0.
// A weight gradient's product runs on oneDNN where `wgrad_onednn[i]` says (as `product` decides).
at::Tensor search_backward_steps(const at::Tensor& grad_out, const at::Tensor& h0, const at::Tensor& mix,
                                 const std::optional<at::Tensor>& mh, const PyLoopWeight& w0h_given,
                                 const std::vector<PyLoopWeight>& ws_given, const std::vector<bool>& wgrad_onednn,
                                 const at::Tensor& out, const at::Tensor& A0, const at::Tensor& S,
                                 const at::Tensor& rstd, const std::vector<at::Tensor>& acts, at::Tensor G0,
                                 at::Tensor grad_mix, std::optional<at::Tensor> grad_ws) {
  at::NoGradGuard no_grad;
  const LoopWeight w0h = loop_weight(w0h_given);
  const std::vector<LoopWeight> ws = loop_weights(ws_given);
  const int64_t T = S.size(0), N = S.size(1) - 1, B = S.size(2), H = S.size(3);
  const std::vector<int64_t> first{TANH};  // s0's edge
  at::Tensor G = at::empty({N * (N + 1) / 2, B, 2 * H}, S.options());  // one step's [dc | dh]
  at::Tensor grad_states = at::empty({N + 1, B, H}, S.options());
  at::Tensor grad_pre = at::empty({B, H}, S.options()), direct = at::empty({B, H}, S.options());
  at::Tensor masked = mh && grad_ws ? at::empty({N, B, H}, S.options()) : at::Tensor();  // S_j m_h for dW_i
  at::Tensor carry = at::zeros_like(h0);  // dh_t from step t + 1
  for (int64_t t = T - 1; t >= 0; --t) {
    const at::Tensor St = S[t];
    grad_states[0].zero_();
    at::Tensor mean_grad = grad_states[1];
    at::add_out(mean_grad, grad_out[t], carry).div_(N);
    grad_states.slice(0, 2).copy_(mean_grad.expand({N - 1, B, H}));
    if (masked.defined()) at::mul_out(masked, St.slice(0, 0, N), *mh);
    for (int64_t i = N - 1; i >= 0; --i) {
      const int64_t k = i + 1, off = i * k / 2;
      const at::Tensor states = St.slice(0, 0, k), g = G.slice(0, off, off + k);
      at::Tensor grad_in = grad_states.slice(0, 0, k);
      batch_norm_backward(grad_states[k], St[k], rstd[t][k], grad_pre);
      mixed_node_backward(grad_pre, acts[t * N + i], states, mix.slice(0, off, off + k), g, grad_in,
                          grad_mix.slice(0, off, off + k));
      const at::Tensor through = loop_product(g.view({k * B, 2 * H}), ws[i]).view({k, B, H});
      mh ? grad_in.addcmul_(through, *mh) : grad_in.add_(through);
      if (grad_ws) {
        const at::Tensor x = (mh ? masked.slice(0, 0, k) : states).view({k * B, H}).t();
        const at::Tensor gt = g.view({k * B, 2 * H});
        at::Tensor target = (*grad_ws)[i];
        wgrad_onednn[i] ? target.add_(linear_pointwise(x, gt.t())) : at::addmm_out(target, target, x, gt);
      }
    }
    const at::Tensor h = t == 0 ? h0 : out[t - 1];
    batch_norm_backward(grad_states[0], St[0], rstd[t][0], grad_pre);
    highway_backward(grad_pre.view({1, 1, B, H}), h.view({1, 1, B, H}), A0[t].view({1, 1, B, 2 * H}), first,
                     G0[t].view({1, 1, B, 2 * H}), direct.view({1, 1, B, H}));
    carry = loop_product(G0[t], w0h);
    if (mh) carry.mul_(*mh);
    carry.add_(direct);
  }
  return carry;
}
// An ESS search gate's DAG (nas/fast/gate_dag.py). Node i mixes identity, tanh, relu and sigmoid of
// each of its sources (its history vector e_i if i <= m, then p_1..p_{i-1}, p_j = s_j W_j) by its
// rows of mix (edges, 4); out = squash(mean of s_1..s_N), squash 0 none, 1 sigmoid, 2 2sigmoid.
// Every tensor is (n, d) and contiguous, W_j (d, d).
void check_gate(const at::Tensor& t, const at::Tensor& like, const char* name) {
  TORCH_CHECK(t.device().is_cpu() && t.dim() == 2 && t.is_contiguous() && t.scalar_type() == like.scalar_type() &&
                  t.sizes() == like.sizes(),
              name, ": a contiguous CPU tensor of the gate's dtype and shape");
}

std::vector<at::Tensor> gate_sources(const std::vector<at::Tensor>& e, const std::vector<at::Tensor>& p, int64_t i) {
  std::vector<at::Tensor> sources;
  if (i <= static_cast<int64_t>(e.size())) sources.push_back(e[i - 1]);
  sources.insert(sources.end(), p.begin(), p.begin() + (i - 1));
  return sources;
}

// Returns out, then s_1..s_N, then p_1..p_{N-1}.
std::vector<at::Tensor> gate_forward(const std::vector<at::Tensor>& e, const std::vector<at::Tensor>& w_node,
                                     const at::Tensor& mix, int64_t squash) {
  TORCH_CHECK(!e.empty(), "a gate reads at least one history vector");
  const at::Tensor& like = e[0];
  for (const auto& t : e) check_gate(t, like, "e");
  const int64_t N = static_cast<int64_t>(w_node.size()) + 1, size = like.numel();
  TORCH_CHECK(static_cast<int64_t>(e.size()) <= N, "more history vectors than nodes");
  TORCH_CHECK(mix.is_contiguous() && mix.dim() == 2 && mix.size(1) == 4 && mix.scalar_type() == like.scalar_type(),
              "mix: (edges, 4) contiguous, of the gate's dtype");
  std::vector<at::Tensor> states, p;
  at::Tensor mean = at::zeros_like(like);
  int64_t rows = 0;
  for (int64_t i = 1; i <= N; ++i) {
    const auto sources = gate_sources(e, p, i);
    TORCH_CHECK(rows + static_cast<int64_t>(sources.size()) <= mix.size(0), "mix: too few rows for the gate's edges");
    at::Tensor s = at::empty_like(like);
    AT_DISPATCH_FLOATING_TYPES(like.scalar_type(), "gate_forward", [&] {
      using V = Vectorized<scalar_t>;
      scalar_t* sp = s.data_ptr<scalar_t>();
      scalar_t* mp = mean.data_ptr<scalar_t>();
      for (size_t j = 0; j < sources.size(); ++j) {
        const scalar_t* w = mix.data_ptr<scalar_t>() + 4 * (rows + static_cast<int64_t>(j));
        const scalar_t* x = sources[j].data_ptr<scalar_t>();
        for (int64_t q = 0; q < size; q += V::size()) {
          const int64_t m = std::min<int64_t>(V::size(), size - q);
          const V v = V::loadu(x + q, m), acc = j == 0 ? V(0) : V::loadu(sp + q, m);
          (acc + V(w[0]) * v + V(w[1]) * tanh(v) + V(w[2]) * at::vec::clamp_min(v, V(0)) + V(w[3]) * sigmoid(v))
              .store(sp + q, m);
        }
      }
      for (int64_t q = 0; q < size; q += V::size()) {
        const int64_t m = std::min<int64_t>(V::size(), size - q);
        (V::loadu(mp + q, m) + V::loadu(sp + q, m)).store(mp + q, m);
      }
    });
    rows += static_cast<int64_t>(sources.size());
    states.push_back(s);
    if (i < N) p.push_back(at::mm(s, w_node[i - 1]));
  }
  TORCH_CHECK(rows == mix.size(0), "mix: more rows than the gate's edges");
  mean.div_(static_cast<double>(N));
  at::Tensor out = squash == 0 ? mean : squash == 1 ? mean.sigmoid() : mean.sigmoid().mul_(2);
  std::vector<at::Tensor> result{out};
  result.insert(result.end(), states.begin(), states.end());
  result.insert(result.end(), p.begin(), p.end());
  return result;
}

// From grad = d out: adds d mix to grad_mix (edges, 4, double); returns d e_1..d e_m, then
// d p_1..d p_{N-1} (whose products with the states are the node matrices' gradients).
std::vector<at::Tensor> gate_backward_into(const at::Tensor& grad, const at::Tensor& out,
                                           const std::vector<at::Tensor>& e, const std::vector<at::Tensor>& p,
                                           const std::vector<at::Tensor>& w_node, const at::Tensor& mix, int64_t squash,
                                           at::Tensor grad_mix) {
  const at::Tensor& like = e[0];
  check_gate(grad, like, "grad");
  check_gate(out, like, "out");
  const int64_t N = static_cast<int64_t>(w_node.size()) + 1, size = like.numel();
  TORCH_CHECK(static_cast<int64_t>(p.size()) == N - 1, "p: one projection per node but the last");
  at::Tensor grad_mean = squash == 0 ? grad / static_cast<double>(N)
                         : squash == 1 ? grad * out * (1 - out) / static_cast<double>(N)
                                       : grad * out * (1 - out / 2) / static_cast<double>(N);
  TORCH_CHECK(grad_mix.is_contiguous() && grad_mix.scalar_type() == at::kDouble && grad_mix.size(0) == mix.size(0) &&
                  grad_mix.size(1) == 4,
              "grad_mix: (edges, 4) contiguous double");
  std::vector<at::Tensor> grad_e(e.size()), grad_p(N - 1);
  int64_t rows = mix.size(0);
  for (int64_t i = N; i >= 1; --i) {
    at::Tensor grad_s = grad_mean;
    if (i < N && grad_p[i - 1].defined()) grad_s = at::addmm(grad_mean, grad_p[i - 1], w_node[i - 1].t());
    const auto sources = gate_sources(e, p, i);
    const int64_t k = static_cast<int64_t>(sources.size());
    rows -= k;
    for (int64_t j = 0; j < k; ++j) {
      at::Tensor grad_src = at::empty_like(like);
      AT_DISPATCH_FLOATING_TYPES(like.scalar_type(), "gate_backward", [&] {
        using V = Vectorized<scalar_t>;
        const scalar_t* w = mix.data_ptr<scalar_t>() + 4 * (rows + j);
        const scalar_t* x = sources[j].data_ptr<scalar_t>();
        const scalar_t* d = grad_s.data_ptr<scalar_t>();
        scalar_t* gp = grad_src.data_ptr<scalar_t>();
        V acc_id(0), acc_tanh(0), acc_relu(0), acc_sig(0);
        for (int64_t q = 0; q < size; q += V::size()) {
          const int64_t m = std::min<int64_t>(V::size(), size - q);
          const V v = V::loadu(x + q, m), ds = V::loadu(d + q, m);
          const V t = tanh(v), r = at::vec::clamp_min(v, V(0)), sg = sigmoid(v);
          const V slope = V(w[0]) + V(w[1]) * (V(1) - t * t) + V::blendv(V(0), V(w[2]), v > V(0)) +
                          V(w[3]) * (sg - sg * sg);
          (ds * slope).store(gp + q, m);
          acc_id = acc_id + ds * v;  // loadu fills lanes past m with zeros, so they add nothing
          acc_tanh = acc_tanh + ds * t;
          acc_relu = acc_relu + ds * r;
          acc_sig = acc_sig + ds * sg;
        }
        double* gw = grad_mix.data_ptr<double>() + 4 * (rows + j);
        gw[0] += lanes_sum(acc_id);
        gw[1] += lanes_sum(acc_tanh);
        gw[2] += lanes_sum(acc_relu);
        gw[3] += lanes_sum(acc_sig);
      });
      if (j == 0 && i <= static_cast<int64_t>(e.size())) {
        grad_e[i - 1] = grad_src;
      } else {
        const int64_t source = j - (i <= static_cast<int64_t>(e.size()) ? 1 : 0);  // p_{source + 1}
        grad_p[source] = grad_p[source].defined() ? grad_p[source].add_(grad_src) : grad_src;
      }
    }
  }
  std::vector<at::Tensor> result(grad_e);
  result.insert(result.end(), grad_p.begin(), grad_p.end());
  return result;
}

// The same, returning d mix (edges, 4) first.
std::vector<at::Tensor> gate_backward(const at::Tensor& grad, const at::Tensor& out, const std::vector<at::Tensor>& e,
                                      const std::vector<at::Tensor>& p, const std::vector<at::Tensor>& w_node,
                                      const at::Tensor& mix, int64_t squash) {
  at::Tensor grad_mix = at::zeros({mix.size(0), 4}, mix.options().dtype(at::kDouble));
  std::vector<at::Tensor> grads = gate_backward_into(grad, out, e, p, w_node, mix, squash, grad_mix);
  grads.insert(grads.begin(), grad_mix.to(mix.scalar_type()));
  return grads;
}
// The ESS joint search's time loop (nas/fast/search_loop.py, FusedGatedSearchCell). At step t:
//   g_t = g'(h_{t-1..t-m}), the gate above with history vectors e_i = h_{t-i} W_hist_i (h_{-i} = h_hist0[i-1]),
//   xp_t = (x_t * g_t) W0x,   h_in = h_{t-1} * f_t   (f = f'(x_{t-m..t-1}), given),
//   h_t = the search cell's step from (xp_t, h_in), as search_forward_steps runs it.
// Fills A0, S, means, variances, rstd and out as search_forward_steps does, and h_in, xhat (x_t * g_t);
// returns, step after step, the cell's N acts, then g_t, e_1..e_m, the gate's states and projections.
std::vector<at::Tensor> search_gated_forward_steps(
    const at::Tensor& xin, const at::Tensor& h0, const at::Tensor& h_hist0, const at::Tensor& f, const at::Tensor& w0x,
    const at::Tensor& w_hist, const at::Tensor& w_node, const at::Tensor& mixg, int64_t squash, const at::Tensor& mix,
    const std::optional<at::Tensor>& mh, const PyLoopWeight& w0h, const std::vector<PyLoopWeight>& ws, double eps,
    at::Tensor A0, at::Tensor S, at::Tensor means, at::Tensor variances, at::Tensor rstd, at::Tensor out,
    at::Tensor h_in, at::Tensor xhat) {
  at::NoGradGuard no_grad;
  const int64_t T = xin.size(0), m = h_hist0.size(0);
  const std::vector<at::Tensor> w_hist_list = w_hist.unbind(0), w_node_list = w_node.unbind(0);
  std::vector<at::Tensor> saved;
  for (int64_t t = 0; t < T; ++t) {
    std::vector<at::Tensor> e;
    for (int64_t i = 1; i <= m; ++i) e.push_back(at::mm(t - i >= 0 ? out[t - i] : h_hist0[i - 1 - t], w_hist_list[i - 1]));
    const std::vector<at::Tensor> gate = gate_forward(e, w_node_list, mixg, squash);  // g_t, states, projections
    at::Tensor xh = xhat[t], hin = h_in[t];
    at::mul_out(xh, xin[t], gate[0]);
    at::mul_out(hin, t == 0 ? h0 : out[t - 1], f[t]);
    const std::vector<at::Tensor> acts =
        search_forward_steps(at::mm(xh, w0x).unsqueeze(0), hin, mix, mh, w0h, ws, eps, A0.narrow(0, t, 1),
                             S.narrow(0, t, 1), means.narrow(0, t, 1), variances.narrow(0, t, 1), rstd.narrow(0, t, 1),
                             out.narrow(0, t, 1));
    saved.insert(saved.end(), acts.begin(), acts.end());
    saved.push_back(gate[0]);
    saved.insert(saved.end(), e.begin(), e.end());
    saved.insert(saved.end(), gate.begin() + 1, gate.end());
  }
  return saved;
}

// Its backward: returns d xin, d f, d h0, d h_hist0; fills G0 (d xp per step, the right factor of the
// W0x and W0h gradients the caller forms) and adds to grad_mix and grad_ws as search_backward_steps does,
// to grad_mixg (the gate's, (edges, 4) double), and, where given, to the gradients of W_hist and the
// gate's node matrices (one product per step each).
std::vector<at::Tensor> search_gated_backward_steps(
    const at::Tensor& grad_out, const at::Tensor& xin, const at::Tensor& h0, const at::Tensor& h_hist0,
    const at::Tensor& f, const at::Tensor& w0x, const at::Tensor& w_hist, const at::Tensor& w_node,
    const at::Tensor& mixg, int64_t squash, const at::Tensor& mix, const std::optional<at::Tensor>& mh,
    const PyLoopWeight& w0h, const std::vector<PyLoopWeight>& ws, const std::vector<bool>& wgrad_onednn,
    const at::Tensor& out, const at::Tensor& A0, const at::Tensor& S, const at::Tensor& rstd, const at::Tensor& h_in,
    const std::vector<at::Tensor>& saved, at::Tensor G0, at::Tensor grad_mix,
    std::optional<at::Tensor> grad_ws, at::Tensor grad_mixg, std::optional<at::Tensor> grad_w_hist,
    std::optional<at::Tensor> grad_w_node) {
  at::NoGradGuard no_grad;
  const int64_t T = xin.size(0), m = h_hist0.size(0), N = ws.size(), Ng = w_node.size(0) + 1;
  const int64_t per = N + 1 + m + Ng + (Ng - 1);
  TORCH_CHECK(static_cast<int64_t>(saved.size()) == T * per, "saved: not what search_gated_forward_steps returned");
  const std::vector<at::Tensor> w_hist_list = w_hist.unbind(0), w_node_list = w_node.unbind(0);
  at::Tensor extra = at::zeros_like(out);  // d h_t from the later steps (their h_in and their gate's history)
  at::Tensor dh0 = at::zeros_like(h0), dh_hist0 = at::zeros_like(h_hist0);
  at::Tensor dxin = at::empty_like(xin), df = at::empty_like(f);
  for (int64_t t = T - 1; t >= 0; --t) {
    const auto base = saved.begin() + t * per;
    const std::vector<at::Tensor> acts(base, base + N), e(base + N + 1, base + N + 1 + m),
        states(base + N + 1 + m, base + N + 1 + m + Ng), p(base + N + 1 + m + Ng, base + per);
    const at::Tensor& g = base[N];
    const at::Tensor dh_in =
        search_backward_steps((grad_out[t] + extra[t]).unsqueeze(0), h_in[t], mix, mh, w0h, ws, wgrad_onednn,
                              out.narrow(0, t, 1), A0.narrow(0, t, 1), S.narrow(0, t, 1), rstd.narrow(0, t, 1), acts,
                              G0.narrow(0, t, 1), grad_mix, grad_ws);
    at::Tensor df_t = df[t];
    at::mul_out(df_t, dh_in, t == 0 ? h0 : out[t - 1]);
    (t == 0 ? dh0 : extra[t - 1]).addcmul_(dh_in, f[t]);
    const at::Tensor dxhat = at::mm(G0[t], w0x.t());
    at::Tensor dxin_t = dxin[t];
    at::mul_out(dxin_t, dxhat, g);
    const std::vector<at::Tensor> grads =
        gate_backward_into(dxhat * xin[t], g, e, p, w_node_list, mixg, squash, grad_mixg);  // d e (m), d p
    for (int64_t j = 0; j < Ng - 1; ++j) {
      if (grad_w_node && grads[m + j].defined()) (*grad_w_node)[j].addmm_(states[j].t(), grads[m + j]);
    }
    for (int64_t i = 1; i <= m; ++i) {
      const at::Tensor hist = t - i >= 0 ? out[t - i] : h_hist0[i - 1 - t];
      if (grad_w_hist) (*grad_w_hist)[i - 1].addmm_(hist.t(), grads[i - 1]);
      at::Tensor target = t - i >= 0 ? extra[t - i] : dh_hist0[i - 1 - t];
      target.addmm_(grads[i - 1], w_hist_list[i - 1].t());
    }
  }
  return {dxin, df, dh0, dh_hist0};
}
// Softmax cross-entropy over the rows of logits (R, V), contiguous: the language model's loss
// (nas/fast/cross_entropy.py). The forward keeps each row's log-sum-exp, not the (R, V) log-softmax;
// the backward forms (softmax - onehot) * scale in one pass over the logits.
void check_logits(const at::Tensor& logits, const at::Tensor& targets) {
  TORCH_CHECK(logits.device().is_cpu() && logits.dim() == 2 && logits.is_contiguous(), "logits: (rows, classes) contiguous");
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0) && targets.scalar_type() == at::kLong &&
                  targets.is_contiguous(),
              "targets: one int64 class per row");
}

// Returns the rows' log-sum-exp (R) and the mean of lse_r - logits[r, target_r] (a 0-d tensor).
std::vector<at::Tensor> cross_entropy_forward(const at::Tensor& logits, const at::Tensor& targets) {
  check_logits(logits, targets);
  const int64_t R = logits.size(0), V = logits.size(1);
  const int64_t* tp = targets.data_ptr<int64_t>();
  for (int64_t r = 0; r < R; ++r) TORCH_CHECK(tp[r] >= 0 && tp[r] < V, "target ", tp[r], " is out of bounds");
  at::Tensor lse = at::empty({R}, logits.options());
  std::vector<double> losses(R);
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "cross_entropy_forward", [&] {
    using V_ = Vectorized<scalar_t>;
    const scalar_t* x = logits.data_ptr<scalar_t>();
    scalar_t* lp = lse.data_ptr<scalar_t>();
    at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t* row = x + r * V;
        const scalar_t top = at::vec::reduce_all<scalar_t>([](V_& a, V_& b) { return at::vec::maximum(a, b); }, row, V);
        const scalar_t sum = at::vec::map_reduce_all<scalar_t>(
            [top](V_ v) { return (v - V_(top)).exp(); }, [](V_ a, V_ b) { return a + b; }, row, V);
        lp[r] = top + std::log(sum);
        losses[r] = static_cast<double>(lp[r]) - static_cast<double>(row[tp[r]]);
      }
    });
  });
  double total = 0;
  for (double l : losses) total += l;
  return {lse, at::scalar_tensor(total / static_cast<double>(R), logits.options())};
}

// d logits = (exp(logits - lse) - onehot(targets)) * scale, scale = d loss / R.
at::Tensor cross_entropy_backward(const at::Tensor& logits, const at::Tensor& targets, const at::Tensor& lse,
                                  double scale) {
  check_logits(logits, targets);
  const int64_t R = logits.size(0), V = logits.size(1);
  at::Tensor grad = at::empty_like(logits);
  AT_DISPATCH_FLOATING_TYPES(logits.scalar_type(), "cross_entropy_backward", [&] {
    using V_ = Vectorized<scalar_t>;
    const scalar_t* x = logits.data_ptr<scalar_t>();
    const scalar_t* lp = lse.data_ptr<scalar_t>();
    const int64_t* tp = targets.data_ptr<int64_t>();
    scalar_t* g = grad.data_ptr<scalar_t>();
    const scalar_t s = static_cast<scalar_t>(scale);
    at::parallel_for(0, R, 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const scalar_t shift = lp[r];
        at::vec::map([shift, s](V_ v) { return (v - V_(shift)).exp() * V_(s); }, g + r * V, x + r * V, V);
        g[r * V + tp[r]] -= s;
      }
    });
  });
  return grad;
}
}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("highway_forward", &highway_forward,
        "act = [c | h] -> [sigmoid(c) | f(h)] in place; out = prev + sigmoid(c)(f(h) - prev)");
  m.def("highway_backward", &highway_backward, "g = [dc | dh] and direct = grad (1 - sigmoid(c)) of the highway");
  m.def("mixed_node_forward", &mixed_node_forward, "a search-cell node: every op over every edge, mixed");
  m.def("mixed_node_backward", &mixed_node_backward, "its [dc | dh], the states' direct gradient, the mixing weights' sums");
  m.def("gate_forward", &gate_forward, "an ESS search gate's DAG: out, the node states, their projections",
        py::call_guard<py::gil_scoped_release>());
  m.def("gate_backward", &gate_backward, "its d mix, d e (history vectors) and d p (node projections)",
        py::call_guard<py::gil_scoped_release>());
  m.def("search_gated_forward_steps", &search_gated_forward_steps,
        "FusedGatedSearchCell.forward's steps: g', the input projection and the cell per step; what the backward reads",
        py::call_guard<py::gil_scoped_release>());
  m.def("search_gated_backward_steps", &search_gated_backward_steps,
        "FusedGatedSearchCell.backward's steps; d xin, d f, d h0, d h_hist0", py::call_guard<py::gil_scoped_release>());
  m.def("cross_entropy_forward", &cross_entropy_forward, "softmax cross-entropy: each row's log-sum-exp, the mean loss",
        py::call_guard<py::gil_scoped_release>());
  m.def("cross_entropy_backward", &cross_entropy_backward, "its d logits, (softmax - onehot) * scale",
        py::call_guard<py::gil_scoped_release>());
  m.def("batch_norm_forward", &batch_norm_forward, "BatchNorm over rows with batch statistics, no affine");
  m.def("batch_norm_backward", &batch_norm_backward, "its derivative through the normalised rows");
  py::class_<FrozenPlan>(m, "FrozenPlan");
  m.def("frozen_plan", &make_plan, "a frozen cell's Plan in the loop's own form: waves (edge start, stop), "
        "their nodes, predecessors and activation codes, groups (wave, edge start, stop, X slot, S slot, first), concat");
  m.def("frozen_forward_steps", &frozen_forward_steps, "FusedFrozenCell's forward steps, every direction",
        py::call_guard<py::gil_scoped_release>());
  m.def("search_forward_steps", &search_forward_steps, "FusedSearchCell.forward's steps; each node's [sigmoid(c) | h]",
        py::call_guard<py::gil_scoped_release>());
  m.def("search_backward_steps", &search_backward_steps, "FusedSearchCell.backward's steps; dh0",
        py::call_guard<py::gil_scoped_release>());
  m.def("frozen_backward_steps", &frozen_backward_steps, "FusedFrozenCell's backward steps, every direction; dh0",
        py::call_guard<py::gil_scoped_release>());
}
