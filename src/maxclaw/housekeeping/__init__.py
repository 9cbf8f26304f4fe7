"""Max's and the operator's housekeeping: rename, archive and delete a thread (``threads``),
list and delete users (``users``). SQL in ``store``; a card is withdrawn through the
transitions table's ``withdraw`` row (components/withdraw.py), never here; a deleted thread's
notifications are withdrawn through the push outbox's one withdraw (push/outbox.py)."""
