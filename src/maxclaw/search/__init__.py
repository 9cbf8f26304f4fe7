"""Search over a user's thread titles, messages and cards (``GET /v1/search``).

PostgreSQL's own search through GIN indexes: English full text (``to_tsvector('english', …)``:
stemming, ranking, ``ts_headline``) and Han phrases (each Han character a word: what finds
Chinese, which the built-in configurations keep as one unsegmented token). Where the server
ships the contrib extensions, trigrams (``pg_trgm``: any substring) and ``user_id`` first in
each index (``btree_gin``) too; where it does not (the embedded PostgreSQL), a word's beginning
stands in for the substring (docs/domain.md, "Search"). What a message offers to search is
``db.search_sql.SEARCH_TEXT``, and only rows that can hold no secret (``SEARCHABLE_MESSAGE``) are
indexed or searched; the two documents the message indexes hold are stored with each message
(``messages.search_fts``, ``search_han``: NULL on any other row), so a search reads them instead
of computing them per candidate.
"""
