"""What `nas` and `tagger` share: the error type, atomic files, run directories, data splits, child
commands, parameter counts for equal-size comparisons, the paired t-test, and the papers' presets."""
