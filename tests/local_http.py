"""What the tests' HTTP clients share.

Every ``httpx`` client builds an SSL context unless given one, loading certifi's bundle: about
22 ms of CPU each, for clients that only ever speak plain HTTP to 127.0.0.1. Helpers that make
a client per call pass this one (py-spy found a fifth of the xdist workers' CPU in `make test`
there; docs/benchmarks.md, issue 33 item 4).
"""

from __future__ import annotations

import ssl

LOCAL_TLS = ssl.create_default_context()
