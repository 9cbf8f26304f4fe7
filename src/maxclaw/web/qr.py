"""A sign-in link as a QR code: an SVG document made on the server (``segno``), so the page
loads no QR library and nothing is fetched from a CDN; the WebUI shows it as a data: image
(its CSP allows ``img-src data:``)."""

from __future__ import annotations

import io

import segno


def qr_svg(text: str) -> str:
    """``text`` as a QR code (error correction M: a phone screen's glare, a slightly blurred
    photo), black on white with the standard quiet zone, scaled for a phone camera."""
    out = io.BytesIO()
    segno.make(text, error="m", micro=False).save(out, kind="svg", scale=6, border=4,
                                                  dark="#000", light="#fff", xmldecl=False)
    return out.getvalue().decode("utf-8")
