"""Property tests (hypothesis): pure functions on arbitrary input, and the card state machine
against a real database compared with a reference model."""
