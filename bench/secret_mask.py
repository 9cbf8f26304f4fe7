"""What the echo check costs: ``Masker`` over one agent row, no match and one match.

    .venv/bin/python -m bench.secret_mask

Prints milliseconds per row for a 1 MiB row (the request body limit) and a 4 KiB row against
the most secrets a thread's check uses (``MAX_SECRETS``), each searched in 7 encodings.
"""

from __future__ import annotations

import os
import statistics
import time

from maxclaw.secrets.mask import MAX_SECRETS, Masker


def main() -> None:
    secrets = [(f"sk-{os.urandom(16).hex()}", f"call_{i}:q3") for i in range(MAX_SECRETS)]
    masker = Masker(secrets)
    filler = "lorem ipsum dolor sit amet, 0123456789 -_=+/ "
    for size in (4 * 1024, 1024 * 1024):
        clean = (filler * (size // len(filler) + 1))[:size]
        echoed = clean[: size // 2] + secrets[-1][0] + clean[size // 2:]
        for label, text in (("no secret", clean), ("one echo", echoed)):
            runs = []
            for _ in range(5):
                start = time.perf_counter()
                masker.text(text)
                runs.append((time.perf_counter() - start) * 1000)
            print(f"{size // 1024:>5} KiB, {len(masker.patterns)} patterns, {label}: "
                  f"{statistics.median(runs):.2f} ms (median of 5)")


if __name__ == "__main__":
    main()
