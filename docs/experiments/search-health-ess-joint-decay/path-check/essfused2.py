"""bin/search-lm with the search cell's fused path on (argv[1] == 'fused') or off, printing per batch the cumulative NLL and α's sum."""
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from nas.cells import search_cell
from nas.runs import search
if sys.argv[1] != "fused":
    search_cell.SearchRNN.fusable = lambda self, *a, **k: False
orig = search.Searcher.bilevel_step
def bilevel(self, *a, **k):
    orig(self, *a, **k)
    alpha = sum(float(v.detach().double().sum()) for v in self.arch.values())
    print(f"batch {self.steps_done} nll {self.totals['nll']:.10g} alpha {alpha:.10g}", flush=True)
search.Searcher.bilevel_step = bilevel
del sys.argv[1]
from nas.cli.search_lm import main
main()
