"""Profile the first-order DARTS search step (H=300, B=64) at 1 thread: where the time goes."""
import sys, tempfile, time
from pathlib import Path
ROOT = __import__("pathlib").Path(__file__).resolve().parents[3]; sys.path[:0] = [str(ROOT / "bench"), str(ROOT)]
import torch
torch.set_num_threads(1)
from search_step import make_searcher, step_fn, config_of
from nas.lm.corpus import Corpus
import argparse
args = argparse.Namespace(method="darts", nhid=300, nodes=8, batch_size=64, bptt=35, device="cpu", vocab=10000)
torch.manual_seed(0)
tokens = 64 * (8 * 35 + 2)
vocab = [f"w{i}" for i in range(10000)]
corpus = Corpus(vocab, torch.randint(10000, (tokens,)), torch.randint(10000, (tokens,)), torch.randint(10000, (tokens,)),
                {s: Path("synthetic") for s in ("train", "valid", "test")})
with tempfile.TemporaryDirectory() as tmp:
    s = make_searcher(config_of(args, 1), corpus, Path(tmp) / "f", False)
    step = step_fn(s, 35, "fp32")
    for _ in range(3): step()
    ts = []
    for _ in range(5):
        t = time.perf_counter(); step(); ts.append(time.perf_counter() - t)
    print("step s", sorted(ts))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=False) as prof:
        for _ in range(3): step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=35))
