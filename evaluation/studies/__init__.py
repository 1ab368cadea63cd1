"""Studies: self-contained experiments with their own models, scenarios and reports."""
