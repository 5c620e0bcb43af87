"""What needs both `nas` and `tagger`, above both: the demo, which searches a cell, retrains it,
trains a tagger on it and tags text, each step as the real command a user would type; and the
search of a cell on the tagging task (`bin/search-tagger`), whose search model is the tagger."""
