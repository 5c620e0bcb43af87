// The two elementwise passes of the fused frozen cell (nas/fused_cell.py), one loop each instead of
// a dozen PyTorch ops: the highway with its activations, and its derivatives. Built by setup.py
// when torch is importable at build time; nas/fused_cell.py falls back to PyTorch ops without it.
//
// Tensors are (D, E, n, K) views with a contiguous last dimension: directions, edges, rows, and
// H (or 2H for [c | h]); `prev` may repeat along E (stride 0). `codes` holds each edge's
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

template <typename T>
inline Vectorized<T> sigmoid(Vectorized<T> x) {
  const Vectorized<T> one(1);
  return one / (one + x.neg().exp());
}

template <typename T, int OP>
inline Vectorized<T> activation(Vectorized<T> h) {
  if constexpr (OP == TANH) return h.tanh();
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

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("highway_forward", &highway_forward,
        "act = [c | h] -> [sigmoid(c) | f(h)] in place; out = prev + sigmoid(c)(f(h) - prev)");
  m.def("highway_backward", &highway_backward, "g = [dc | dh] and direct = grad (1 - sigmoid(c)) of the highway");
}
