"""One adapter per platform; each renders the one payload shape (``payload.py``) and sends it."""
