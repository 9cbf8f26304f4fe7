"""push capability."""
