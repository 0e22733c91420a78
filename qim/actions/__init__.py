"""The only code that writes: one module per topic."""
