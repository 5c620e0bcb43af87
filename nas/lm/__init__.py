"""The language model a cell is searched and retrained in: embedding → recurrent layer → tied decoder
(`model`, `lstm`), its corpus and batches (`corpus`), its evaluation (`evaluation`) and its weights-only
model file (`model_file`)."""
