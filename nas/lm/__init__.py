"""The language model a cell is searched and retrained in: embedding → recurrent layer → tied decoder
(`model`, `lstm`, `search_model`), its corpus and batches (`corpus`), perplexity (`evaluation`), its
weights-only model file (`model_file`), and word-level comparisons of two models (`wordloss`)."""
