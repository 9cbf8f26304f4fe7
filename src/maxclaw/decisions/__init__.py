"""decisions capability."""
