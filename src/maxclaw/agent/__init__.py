"""agent capability."""
