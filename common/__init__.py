"""What `nas` and `tagger` share: the error type, atomic files, run directories, data splits, run curves."""
