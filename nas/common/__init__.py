"""What `nas` and `tagger` share: the error type, the command-line plumbing, atomic files, run
directories, data splits, run curves, child commands, parameter counts for equal-size comparisons,
the paired t-test, and the papers' presets."""
