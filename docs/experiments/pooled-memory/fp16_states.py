"""bin/train-tagger with the character-LM states rounded to float16 (kept as float32): does F1 change?
Same arguments as bin/train-tagger; run from the repository root with the venv active."""
import runpy, sys
from pathlib import Path
ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
import tagger.charlm_states as cs
original = cs.StateTable.add
def add(self, sentences):
    original(self, sentences)
    for s in sentences:
        k = cs._key(s)
        self.states[k] = self.states[k].half().float()
cs.StateTable.add = add
sys.argv = ["train-tagger"] + sys.argv[1:]
runpy.run_path(str(ROOT / "bin" / "train-tagger"), run_name="__main__")
