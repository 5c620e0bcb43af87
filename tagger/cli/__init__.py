"""The click commands behind `bin/`; one module per command."""
