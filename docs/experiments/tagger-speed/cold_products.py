"""Issue 35, 2026-11-25: the frozen loop's per-step product shapes (DARTS_V2 at hidden 256: rows x K x N),
torch.mm against oneDNN on a packed weight, with one weight multiplied again and again (it stays in
cache, as `nas.fast.gemm.prefers_onednn` measures) and with 16 different weights in turn (they
stream from L3, as the layer's 4.7 MB of per-direction weights do). Microseconds a product, medians
of 5. Run from the repository root: taskset -c 0 .venv/bin/python docs/experiments/tagger-speed/cold_products.py
"""
import torch, time, statistics
torch.set_num_threads(1)
from nas.fast.gemm import pack, _onednn_product
def bench(rows, K, N, copies):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, K, generator=g)
    ws = [torch.randn(N, K, generator=g) for _ in range(copies)]
    ps = [pack(w) for w in ws]
    calls = 200
    def run(f):
        t = time.perf_counter()
        for i in range(calls):
            f(i % copies)
        return (time.perf_counter() - t) / calls * 1e6
    a, b = [], []
    for _ in range(6):
        a.append(run(lambda i: torch.mm(x, ws[i].t())))
        b.append(run(lambda i: _onednn_product(x, ps[i], None)))
    return statistics.median(a[1:]), statistics.median(b[1:])
for rows in (8, 32):
    for K, N in ((256, 512), (256, 1024), (256, 1536), (512, 256), (1024, 256), (1536, 256)):
        for copies in (1, 16):
            m, o = bench(rows, K, N, copies)
            print(f"rows {rows} K {K} N {N} copies {copies}: mkl {m:7.1f} us  onednn {o:7.1f} us  mkl/onednn {m/o:.2f}  GF/s mkl {2*rows*K*N/m/1e3:.0f}")
