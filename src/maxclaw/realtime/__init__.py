"""realtime capability."""
