"""Commands that chain `nas` and `tagger`: the demo, which searches a cell, retrains it, trains a
tagger on it and tags text, each step as the real command a user would type."""
