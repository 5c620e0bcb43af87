"""Issue 30, 2026-11-26: Adam's state for α in a search's checkpoint: per architect and α tensor, the
first moment |m| and the square root of the second moment √v (median and largest entry), and their
ratio, which scales every step Adam takes on α (a step is about lr · m / √v). The checkpoints stay
outside the repository; run on the run directories of ess_joint.sh / ess_intra.sh:

    python docs/experiments/search-health-ess-joint-decay/adam_state.py /work/runs/study30e/ess_joint_s2 ...
"""
import sys

from nas.common.runs import RunDir

for run in sys.argv[1:]:
    checkpoint = RunDir(run).load_checkpoint()  # weights only, no pickles
    print(run, "epoch", checkpoint["epoch"])
    for name, architect in checkpoint["architects"].items():
        for index, state in architect["state"].items():
            m, root_v = state["exp_avg"].abs(), state["exp_avg_sq"].sqrt()
            print(f"  {name} α[{index}] {tuple(m.shape)}, {int(state['step'])} steps: |m| median {float(m.median()):.2e} "
                  f"largest {float(m.max()):.2e}; √v median {float(root_v.median()):.2e} largest {float(root_v.max()):.2e}; "
                  f"median |m|/√v {float((m / (root_v + 1e-8)).median()):.1e}")
