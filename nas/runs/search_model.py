"""The model a search trains (DARTS's rnn/model_search.py): embedding → the method's search layer → tied decoder."""

from __future__ import annotations

from nas.cells.attention import search_attention
from nas.fast.backends import attach
from nas.lm.model import RNNModel
from nas.methods import method_class, search_settings
from nas.runs.config import SearchConfig


def build_search_model(config: SearchConfig, ntoken: int) -> RNNModel:
    """The search model of `config`: its method builds the layer, with the NASABN attention (if any) after it;
    its cells on the process's backend (`nas.fast.backends.current`)."""
    c = config
    attention = search_attention(c.attention, c.nhid, c.attention_heads)
    rnn = method_class(c.method).layer(search_settings(c), attention)
    return attach(RNNModel(ntoken, c.emsize, rnn, c.dropout, c.dropouti, c.dropoute))
