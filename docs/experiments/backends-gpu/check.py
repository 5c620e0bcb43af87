"""cuda-graphs' cell level on a GPU (issue 58, item 1): `python check.py search|frozen` from the checkout's root.
The compiled time step (torch.compile, inductor/Triton) against the definition on the same weights and inputs:
values and gradients (float32: largest difference over the tensor's largest entry), then forward+backward
times of both (medians of 10, after 3 warm-ups), and the graphs dynamo made. One JSON line."""
import json, statistics, sys, time
import torch
import torch._dynamo
import nas.fast.backends as backends
from nas.cells.cell import FrozenRNN
from nas.cells.genotype import load
from nas.cells.search_cell import SearchRNN
from nas.methods.darts import Darts

what, dev = sys.argv[1], torch.device("cuda")
torch.manual_seed(0)
if what == "search":  # the papers' search cell: H = 300, 8 nodes, batch 256, 35 steps
    layer = SearchRNN(300, 300, 8, Darts.rule, dropout_x=0.25, dropout_h=0.25).to(dev)
    x = torch.randn(35, 256, 300, device=dev, requires_grad=True)
    args = (x,)
else:  # bench/birnn.py's batch: DARTS_V2, 4,096 -> 512, 32 sentences of lengths N(14, 10)
    layer = FrozenRNN(load("darts_v2"), 4096, 512, directions=2).to(dev)
    g = torch.Generator().manual_seed(0)
    lengths = (torch.randn(32, generator=g) * 10 + 14).round().clamp(min=1).long()
    x = torch.randn(int(lengths.max()), 32, 4096, device=dev)
    args = (x, None, lengths)


def run():
    torch.manual_seed(1)
    out, _ = layer(*args)
    loss = (out * torch.linspace(-1, 1, out.numel(), device=dev).view_as(out)).sum()
    return [out, *torch.autograd.grad(loss, [p for p in layer.parameters() if p.requires_grad])]


def timed():
    for _ in range(3):
        run()
    times = []
    for _ in range(10):
        torch.cuda.synchronize(); t = time.perf_counter(); run(); torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


record = {"what": what, "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
          "auto": backends.resolve("auto", dev)}
layer.backend = None
reference = run()
eager_s = timed()
layer.backend = backends.choose("cuda-graphs", dev)
t = time.perf_counter(); got = run(); record["first_call_s"] = round(time.perf_counter() - t, 1)
record["max_rel_diff"] = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(got, reference))
record["compiled_s"], record["eager_s"] = round(timed(), 4), round(eager_s, 4)
record["speedup"] = round(eager_s / record["compiled_s"], 2)
record["graphs"] = torch._dynamo.utils.counters["stats"]["unique_graphs"]
print(json.dumps(record))
