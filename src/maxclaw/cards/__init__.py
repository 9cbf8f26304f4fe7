"""Cards as data: the definitions an agent posts (``definitions``), answer validation and the
stored answer (``answers``), the words the model and Main read (``text``), and pure rules
(``rules``).

A leaf: it imports only the foundations ``maxclaw.errors`` and ``maxclaw.jsonlimits``, so the
services that move cards (components, decisions, timeline, turns) can all depend on it without
depending on each other.
"""
