"""The runs of the language-model wing: a search (`search`) and a retraining (`train`) on one
training loop (`loop`), their settings (`config`), torchrun ranks (`distributed`), the search's
health (`health`), several seeds and the choice among them (`seeds`), and weight-sharing
candidates scored on Ray workers (`candidates`)."""
