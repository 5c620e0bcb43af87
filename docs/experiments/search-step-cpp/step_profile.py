import sys, tempfile
sys.path.insert(0, "bench")
from pathlib import Path
import torch
torch.set_num_threads(1)
import search_step as ss
from nas.lm.corpus import Corpus
from torch.profiler import profile, ProfilerActivity
torch.manual_seed(0)
V, B, bptt, H = 10000, 64, 35, 300
tokens = B * (8 * bptt + 2)
vocab = [f"w{i}" for i in range(V)]
corpus = Corpus(vocab, torch.randint(V, (tokens,)), torch.randint(V, (tokens,)), torch.randint(V, (tokens,)), {s: Path("synthetic") for s in ("train", "valid", "test")})
class A: pass
args = A(); args.nhid, args.nodes, args.batch_size, args.bptt, args.device, args.method = H, 8, B, bptt, "cpu", "darts"
with tempfile.TemporaryDirectory() as tmp:
    s = ss.make_searcher(ss.config_of(args, 1), corpus, Path(tmp) / "f", False)
    s.rnn.fused = True
    step = ss.step_fn(s, bptt, "fp32")
    step(); step()
    with profile(activities=[ProfilerActivity.CPU]) as p:
        for _ in range(3): step()
rows = sorted(p.key_averages(), key=lambda e: -e.self_cpu_time_total)
tot = sum(e.self_cpu_time_total for e in rows)
for e in rows[:22]:
    print(f"{e.key:45s} {e.self_cpu_time_total/3/1e3:8.1f} ms {100*e.self_cpu_time_total/tot:5.1f}%  calls {e.count/3:7.1f}")
