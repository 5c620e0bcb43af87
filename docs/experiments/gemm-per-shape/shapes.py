"""Issue 35: oneDNN (packed) vs torch.mm per shape of the fused search loop's per-step products, 3 independent measurements each."""
import statistics, time, json, sys
import torch
from nas.fast import gemm
torch.set_num_threads(1)
def ratio(rows, K, N, repeats=5):
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(rows, K, generator=gen), torch.randn(K, N, generator=gen)
    packed = gemm.torch.ops.mkldnn._reorder_linear_weight(w.t().contiguous(), None)
    calls = min(100, max(1, int(4e7 // (2 * rows * K * N))))
    def sec(fn):
        s = time.perf_counter()
        for _ in range(calls): fn()
        return time.perf_counter() - s
    m, o = [], []
    for _ in range(repeats + 1):
        m.append(sec(lambda: torch.mm(x, w))); o.append(sec(lambda: gemm.product(x, packed)))
    return statistics.median(m[1:]) / statistics.median(o[1:])
for H in (64, 300):
    for rows in (64, 128, 256, 512):
        for K, N in ((H, 2 * H), (2 * H, H)):
            r = [round(ratio(rows, K, N), 2) for _ in range(3)]
            print(json.dumps({"H": H, "rows": rows, "K": K, "N": N, "mkl_over_onednn": r, "choice": ["onednn" if x > gemm.MARGIN else "mkl" for x in r]}), flush=True)
