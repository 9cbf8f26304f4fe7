"""Turns, server side: claims and leases (``service``, ``store``), the runtime's rows
(``messages``), the model's history (``history``), the forged-notice guard (``guard``) and the
LISTEN connection that wakes long-polling claims (``listener``)."""
