"""The model a search trains (DARTS's rnn/model_search.py): embedding → the method's search layer → tied decoder."""

from __future__ import annotations

from nas.cells.attention import search_attention
from nas.lm.model import RNNModel
from nas.methods import method_class, search_settings
from nas.runs.config import SearchConfig
from nas.speed import Backend, attach, of


def build_search_model(config: SearchConfig, ntoken: int, backend: Backend | None = None) -> RNNModel:
    """The search model of `config`: its method builds the layer, with the NASABN attention (if any) after it;
    on `backend`, by default the run's (`nas.speed.of(config)`)."""
    c = config
    attention = search_attention(c.attention, c.nhid, c.attention_heads)
    rnn = method_class(c.method).layer(search_settings(c), attention)
    return attach(
        RNNModel(ntoken, c.emsize, rnn, c.dropout, c.dropouti, c.dropoute), of(c) if backend is None else backend
    )
