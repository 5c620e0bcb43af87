"""bin/search-lm with the search cell's fused path on (argv[1] == 'fused') or off; the rest of argv to the command."""
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[4]))
from nas.cells import search_cell
if sys.argv[1] != "fused":
    search_cell.SearchRNN.fusable = lambda self, *a, **k: False
del sys.argv[1]
from nas.cli.search_lm import main
main()
