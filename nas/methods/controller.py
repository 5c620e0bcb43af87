"""The ENAS controller (Pham et al., ICML 2018): an LSTM policy over the cells of the search space, and its REINFORCE
update.

The controller writes a cell one decision at a time. For node i = 1..N it picks the predecessor
j < i (node 1 has only s0), by attention of its current state over the states it had after each
earlier node, then the op from {identity, tanh, relu, sigmoid}; each choice is fed back as its
next input (the chosen predecessor's state, the op's embedding). This is the controller of the
paper's §2.1 on the DARTS space (no `none`, s0 fixed as in DARTS); the attention over earlier
nodes is that of the ENAS code (melodyguan/enas, src/ptb/ptb_enas_controller.py). That code also
subtracts (i − j)²/12 from the predecessor logits, a prior toward recent nodes; it is left out
here, so that the controller starts near the uniform distribution the random baselines draw from.

Settings and their sources:
- HIDDEN = 100: the LSTM size (ENAS code: lstm_size=100 for PTB in src/ptb/main.py; ENAS-pytorch
  by carpedm20: --controller_hid 100);
- TANH_CONSTANT = 2.5, TEMPERATURE = 5.0: logits = 2.5·tanh(raw / 5.0) (paper §3.1; ENAS code,
  scripts/ptb_search.sh), for sampling and for the derivation alike;
- INIT_RANGE = 0.1: every parameter starts uniform in [−0.1, 0.1] (both codes);
- REINFORCE (paper §2.2): the loss −log π(m)·(R − b) for reward R, b a moving average of the
  rewards, b ← decay·b + (1 − decay)·R before it is used, starting at the first reward
  (ENAS-pytorch); the controller's sample entropy, weighted, is added to the reward (paper §3.1;
  both codes); Adam; no gradient clipping (neither code clips the PTB controller).
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from nas.cells.genotype import Genotype
from nas.methods.sampling import CANDIDATE_OPS

HIDDEN = 100
TANH_CONSTANT = 2.5
TEMPERATURE = 5.0
INIT_RANGE = 0.1


class Sample(NamedTuple):
    genotype: Genotype
    log_prob: torch.Tensor  # log π(genotype), with its graph to the controller's parameters
    entropy: torch.Tensor  # Σ over the decisions of the entropy of each choice's distribution (no graph)


Choose = Callable[[torch.Tensor, int], int]  # (logits of one decision (1, k), its number) → the choice


class Controller(nn.Module):
    """A policy over the cells of `nodes` nodes (one input each); runs on the CPU, in fp32."""

    def __init__(self, nodes: int, hidden: int = HIDDEN):
        super().__init__()
        self.nodes = nodes
        self.lstm = nn.LSTMCell(hidden, hidden)
        self.start = nn.Parameter(torch.empty(1, hidden))  # the first input
        self.op_embedding = nn.Embedding(len(CANDIDATE_OPS), hidden)
        self.op_logits = nn.Linear(hidden, len(CANDIDATE_OPS), bias=False)
        self.key = nn.Linear(hidden, hidden, bias=False)  # attention over the earlier nodes' states
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.score = nn.Linear(hidden, 1, bias=False)
        for p in self.parameters():
            nn.init.uniform_(p, -INIT_RANGE, INIT_RANGE)

    def sample(self, generator: torch.Generator) -> Sample:
        """A cell drawn from the policy with `generator`."""
        return self._walk(lambda logits, _: int(torch.multinomial(F.softmax(logits, -1), 1, generator=generator)))

    def greedy(self) -> Genotype:
        """The cell of the most likely choice at every decision."""
        with torch.no_grad():
            return self._walk(lambda logits, _: int(logits.argmax())).genotype

    def log_prob(self, genotype: Genotype) -> torch.Tensor:
        """log π(genotype), for a cell of one input per node."""
        choices = []
        for i, ((op, pred),) in enumerate(genotype.nodes, start=1):
            choices += ([pred] if i > 1 else []) + [CANDIDATE_OPS.index(op)]
        return self._walk(lambda _, k: choices[k]).log_prob

    def _walk(self, choose: Choose) -> Sample:
        """Run the decisions in order, each made by `choose`: for node i, its predecessor (i > 1), then its op."""
        with torch.autocast("cpu", enabled=False):  # a bf16 search still samples in fp32
            h, c = self.lstm(self.start)
            keys = [self.key(h)]
            states = [(h, c)]
            nodes, log_prob, entropy, k = [], torch.zeros(()), torch.zeros(()), 0
            for i in range(1, self.nodes + 1):
                pred = 0
                if i > 1:
                    logits = self.score(torch.tanh(torch.cat(keys) + self.query(h))).view(1, i)
                    pred, lp, ent = _decide(logits, choose, k)
                    log_prob, entropy, k = log_prob + lp, entropy + ent, k + 1
                h, c = self.lstm(states[pred][0], (h, c))
                op, lp, ent = _decide(self.op_logits(h), choose, k)
                log_prob, entropy, k = log_prob + lp, entropy + ent, k + 1
                h, c = self.lstm(self.op_embedding.weight[op : op + 1], (h, c))  # node i as later nodes see it
                keys.append(self.key(h))
                states.append((h, c))
                nodes.append(((CANDIDATE_OPS[op], pred),))
        return Sample(Genotype(tuple(nodes), tuple(range(1, self.nodes + 1))), log_prob, entropy.detach())


def _decide(raw: torch.Tensor, choose: Choose, k: int) -> tuple[int, torch.Tensor, torch.Tensor]:
    """Decision `k`: the choice, its log-probability and the entropy of its distribution."""
    logits = TANH_CONSTANT * torch.tanh(raw / TEMPERATURE)
    logp = F.log_softmax(logits, -1)
    choice = choose(logits, k)
    return choice, logp[0, choice], -(logp.exp() * logp).sum()


class Reinforce:
    """REINFORCE with a moving-average baseline and an entropy bonus (ENAS §2.2, §3.1), with Adam."""

    def __init__(self, controller: Controller, lr: float, entropy_weight: float, baseline_decay: float):
        self.controller, self.entropy_weight, self.decay = controller, entropy_weight, baseline_decay
        self.optimizer = torch.optim.Adam(controller.parameters(), lr=lr)
        self.baseline: float | None = None

    def step(self, sample: Sample, reward: float) -> float:
        """One update toward `sample` in proportion to its reward (plus the entropy bonus) above the baseline; returns
        that reward.
        """
        reward = reward + self.entropy_weight * float(sample.entropy)
        self.baseline = reward if self.baseline is None else self.decay * self.baseline + (1 - self.decay) * reward
        loss = -sample.log_prob * (reward - self.baseline)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return reward

    def state_dict(self) -> dict:
        return {
            "controller": self.controller.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "baseline": self.baseline,
        }

    def load_state_dict(self, state: dict) -> None:
        self.controller.load_state_dict(state["controller"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.baseline = state["baseline"]
