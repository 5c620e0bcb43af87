// The elementwise passes of the fused cells, one loop each instead of a dozen PyTorch ops: for the
// frozen cell (nas/fused_cell.py) the highway with its activations and its derivatives; for the
// search cell (nas/fused_search_cell.py) a node mixing every op over all its edges, its derivatives
// with the mixing weights' gradient, and BatchNorm's normalisation and its derivative. Built by
// setup.py when torch is importable at build time; without them the frozen cell runs PyTorch ops
// and the search cell its autograd path.
//
// Frozen-cell tensors are (D, E, n, K) views with a contiguous last dimension: directions, edges,
// rows, and H (or 2H for [c | h]); `prev` may repeat along E (stride 0). `codes` holds each edge's
// activation: 0 identity, 1 tanh, 2 relu, 3 sigmoid (nas/fused_cell.py: OP_CODES).
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
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/extension.h>

#include <algorithm>
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

// ---- The search cell (nas/fused_search_cell.py) ----------------------------------------------
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
      for (int64_t r = begin; r < end; ++r) {
        scalar_t* o = out.data_ptr<scalar_t>() + r * out.stride(0);
        for (int64_t x = 0; x < H; x += V::size()) {
          const int64_t m = std::min<int64_t>(V::size(), H - x);
          V acc(0);
          for (int64_t j = 0; j < k; ++j) {
            const scalar_t* wj = wp + 4 * j;
            const scalar_t keep = wj[0] + wj[1] + wj[2] + wj[3];
            const scalar_t* cj = row<scalar_t>(ch, j, r);
            scalar_t* aj = row<scalar_t>(act, j, r);
            const V sc = sigmoid(V::loadu(cj + x, m)), h = V::loadu(cj + H + x, m);
            const V s = V::loadu(row<scalar_t>(states, j, r) + x, m);
            const V mix = V(wj[0]) * h + V(wj[1]) * tanh(h) + V(wj[2]) * at::vec::clamp_min(h, V(0)) +
                          V(wj[3]) * sigmoid(h);
            acc = acc + V(keep) * s + sc * (mix - V(keep) * s);
            sc.store(aj + x, m);
            if (aj != cj) h.store(aj + H + x, m);
          }
          acc.store(o + x, m);
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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("highway_forward", &highway_forward,
        "act = [c | h] -> [sigmoid(c) | f(h)] in place; out = prev + sigmoid(c)(f(h) - prev)");
  m.def("highway_backward", &highway_backward, "g = [dc | dh] and direct = grad (1 - sigmoid(c)) of the highway");
  m.def("mixed_node_forward", &mixed_node_forward, "a search-cell node: every op over every edge, mixed");
  m.def("mixed_node_backward", &mixed_node_backward, "its [dc | dh], the states' direct gradient, the mixing weights' sums");
  m.def("batch_norm_forward", &batch_norm_forward, "BatchNorm over rows with batch statistics, no affine");
  m.def("batch_norm_backward", &batch_norm_backward, "its derivative through the normalised rows");
}
