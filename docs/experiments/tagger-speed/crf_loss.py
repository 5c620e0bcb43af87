"""The CRF loss alone, forward and backward: flair's ViterbiLoss against tagger.crf.CRFLoss, interleaved
in one process (1 thread; medians of 9). A batch of 32 sentences of 5-45 tokens, CoNLL-2000's 43 tags
(41 BIOES chunk tags, <START>, <STOP>), the scores formed as flair's CRF module forms them.

    taskset -c 0 .venv/bin/python docs/experiments/tagger-speed/crf_loss.py
"""
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from flair.data import Dictionary  # noqa: E402
from flair.models.sequence_tagger_utils.viterbi import ViterbiLoss  # noqa: E402

from nas.common.memory import keep_freed_memory  # noqa: E402
from tagger.crf import CRFLoss  # noqa: E402

torch.set_num_threads(1)
keep_freed_memory()
tags = Dictionary(add_unk=False)
for tag in ["O"] + [f"{p}-{k}" for k in "ABCDEFGHIJ" for p in "BIES"] + ["<START>", "<STOP>"]:
    tags.add_item(tag)
K, B, T = len(tags), 32, 45
torch.manual_seed(0)
lengths = torch.tensor(sorted([T] + torch.randint(5, T + 1, (B - 1,)).tolist(), reverse=True))
emissions, transitions = torch.randn(B, T, K), torch.randn(K, K)
targets = torch.cat([torch.randint(0, K - 2, (int(n),)) for n in lengths])


def step(loss_function) -> float:
    """Forward and backward from the emissions: flair's ViterbiLoss on the pair scores flair's CRF
    module forms (timed with them), CRFLoss on the emissions. (The CRFLoss of 5b84e62 to baf3ab7
    took flair's pair scores too; its figures were taken with this script passing them.)"""
    e, tr = emissions.clone().requires_grad_(), transitions.clone().requires_grad_()
    start = time.perf_counter()
    pairs = not isinstance(loss_function, CRFLoss)
    scores = e.unsqueeze(-1).expand(B, T, K, K) + tr.unsqueeze(0).unsqueeze(0) if pairs else e
    loss_function((scores, lengths, tr), targets).backward()
    return time.perf_counter() - start


losses = {"flair_viterbi_loss": ViterbiLoss(tags), "crf_loss": CRFLoss(tags)}
times = {name: [] for name in losses}
for name, f in losses.items():
    step(f)
for _ in range(9):
    for name, f in losses.items():
        times[name].append(step(f))
record = {name: round(statistics.median(t) * 1e3, 2) for name, t in times.items()}
record = {"batch": B, "longest": T, "tags": K, "ms": record,
          "ratio": round(record["flair_viterbi_loss"] / record["crf_loss"], 2)}
print(json.dumps(record))
