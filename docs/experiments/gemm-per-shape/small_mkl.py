import sys, torch, tempfile, time, statistics
sys.path.insert(0, "bench"); sys.argv = ["x"]
import search_step as ss
import nas.fast.gemm as gemm
from pathlib import Path
from nas.lm.corpus import Corpus
torch.set_num_threads(1)
H = int(sys.argv[1]) if len(sys.argv) > 1 else 64
LIMIT = float(sys.argv[2]) if len(sys.argv) > 2 else 2**21
orig_product, orig_pack = gemm.product, gemm.pack
state = {"on": False}
def pack(w):
    if state["on"]:
        return w
    return orig_pack(w)
def product(x, weight, out=None, accumulate=False, bias=None):
    if state["on"] and not gemm._packed(weight) and x.size(0) * x.size(1) * weight.size(0) < LIMIT and bias is None:
        if out is None: return torch.mm(x, weight.t())
        return torch.addmm(out, x, weight.t(), out=out) if accumulate else torch.mm(x, weight.t(), out=out)
    return orig_product(x, weight, out, accumulate, bias)
import nas.fast.search_loop as sl, nas.fast.frozen_loop as fl
for mod in (sl, fl, gemm):
    if hasattr(mod, "product"): mod.product = product
    if hasattr(mod, "pack"): mod.pack = pack
class A: pass
torch.manual_seed(0)
tokens = 64*(8*35+2)
corpus = Corpus([f"w{i}" for i in range(10000)], torch.randint(10000,(tokens,)), torch.randint(10000,(tokens,)), torch.randint(10000,(tokens,)), {s: Path("synthetic") for s in ("train","valid","test")})
steps = {}
with tempfile.TemporaryDirectory() as tmp:
    for method in ("darts", "ess"):
        a = A(); a.method=method; a.nhid=H; a.nodes=8; a.batch_size=64; a.bptt=35; a.device="cpu"
        s = ss.make_searcher(ss.config_of(a, 1), corpus, Path(tmp)/method, False)
        steps[method] = ss.step_fn(s, 35, "fp32"); steps[method]()
    ts = {(m, on): [] for m in steps for on in (False, True)}
    for _ in range(7):
        for m, f in steps.items():
            for on in (False, True):
                state["on"] = on
                t = time.perf_counter(); f(); ts[(m, on)].append(time.perf_counter() - t)
    print(H, {f"{m}{'_smallmkl' if on else ''}": round(statistics.median(v), 4) for (m, on), v in ts.items()})
