"""Time each kind of call inside FusedSearchCell's forward and backward (H=300, B=64, T=35, 8 nodes), 1 thread."""
import sys, time, collections
ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]; sys.path.insert(0, str(ROOT))
import torch
torch.set_num_threads(1)
from nas.common.memory import keep_freed_memory; keep_freed_memory()
import nas.fast.search_loop as sl
from nas.fast import kernels as K

acc = collections.defaultdict(float); cnt = collections.Counter()
phase = ["?"]
def wrap(name, fn):
    def w(*a, **k):
        t = time.perf_counter(); r = fn(*a, **k); acc[phase[0] + name] += time.perf_counter() - t; cnt[phase[0] + name] += 1; return r
    return w
real = K.compiled()
class Kern:
    pass
kern = Kern()
for n in ("batch_norm_forward", "batch_norm_backward", "mixed_node_forward", "mixed_node_backward"):
    setattr(kern, n, wrap(n, getattr(real, n)))
sl.compiled = lambda: kern
_p = sl.product
_pa, _pb = wrap("product wgrad", _p), wrap("product", _p)
sl.product = lambda *a, **k: (_pa if k.get("accumulate") or len(a) > 2 else _pb)(*a, **k)
sl.highway_forward = wrap("highway_forward", sl.highway_forward)
sl.highway_backward = wrap("highway_backward", sl.highway_backward)

T, B, H, N = 35, 64, 300, 8
torch.manual_seed(0)
E = N * (N + 1) // 2
xproj = torch.randn(T, B, 2 * H, requires_grad=True)
h0 = torch.randn(B, H)
w0h = (torch.randn(H, 2 * H) * 0.04).requires_grad_()
ws = (torch.randn(N, H, 2 * H) * 0.04).requires_grad_()
mix = torch.softmax(torch.randn(E, 4), -1).requires_grad_()
mh = torch.bernoulli(torch.full((B, H), 0.75)) / 0.75
bn = torch.nn.ModuleList(torch.nn.BatchNorm1d(H, affine=False) for _ in range(N + 1))
go = torch.randn(T, B, H)
def run():
    out = sl.fused_search_cell(xproj, h0, w0h, ws, mix, mh, bn)
    out.backward(go)
for _ in range(2): run()
acc.clear(); cnt.clear()
reps = 5
t0 = time.perf_counter()
for _ in range(reps):
    phase[0] = "F "
    tf = time.perf_counter()
    out = sl.fused_search_cell(xproj, h0, w0h, ws, mix, mh, bn)
    acc["FORWARD total"] += time.perf_counter() - tf
    phase[0] = "B "
    tb = time.perf_counter()
    out.backward(go)
    acc["BACKWARD total"] += time.perf_counter() - tb
total = time.perf_counter() - t0
for k, v in sorted(acc.items(), key=lambda kv: -kv[1]):
    print(f"{k:22s} {1000 * v / reps:8.1f} ms/pass-pair  calls {cnt[k] // reps}")
print("total", 1000 * total / reps)
