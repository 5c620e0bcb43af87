"""bench/search_step.py's comparison with the original DARTS code's structure: its swapped-in cell and
α step must still take what search-lm's method builds them with (a changed signature broke it once)."""

import sys
from argparse import Namespace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import search_step  # noqa: E402
from nas.lm.corpus import Corpus  # noqa: E402
from reference.darts import ReferenceArchitect, ReferenceSearchRNN  # noqa: E402


def test_the_reference_search_step_runs_with_the_reference_cell_and_alpha_step(tmp_path):
    args = Namespace(method="darts", nhid=8, nodes=3, batch_size=2, bptt=3, device="cpu")
    words = [f"w{i}" for i in range(20)]
    corpus = Corpus(
        words, *(torch.randint(20, (40,)) for _ in range(3)), {s: Path("synthetic") for s in ("train", "valid", "test")}
    )
    searcher = search_step.make_searcher(search_step.config_of(args, order=1), corpus, tmp_path, reference=True)
    assert isinstance(searcher.rnn, ReferenceSearchRNN)
    assert all(isinstance(a, ReferenceArchitect) for a in searcher.method.architects.values())
    alpha = searcher.rnn.alpha.detach().clone()
    search_step.step_fn(searcher, args.bptt, "fp32")()
    assert not torch.equal(searcher.rnn.alpha, alpha)  # the reference α step moved α
