"""Draw the WebUI's icons (three claw marks on the accent blue) into ``src/maxclaw/web/static``.

Run once after changing the design: ``.venv/bin/python scripts/webui_icons.py``. The PNGs are
committed; nothing draws them at run time.
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

STATIC = Path(__file__).resolve().parents[1] / "src" / "maxclaw" / "web" / "static"
ACCENT = (36, 86, 199, 255)
WHITE = (255, 255, 255, 255)
SCALE = 4  # draw large, then shrink: smooth edges without an anti-aliasing pass


def claws(draw: ImageDraw.ImageDraw, size: int, inset: float, colour: tuple[int, ...]) -> None:
    """Three slanted strokes inside the square ``inset`` from each edge."""
    box = size * (1 - 2 * inset)
    width = max(int(box * 0.12), 1)
    for i in range(3):
        x = size * inset + box * (0.22 + 0.28 * i)
        top = (x + box * 0.12, size * inset + box * 0.12)
        bottom = (x - box * 0.12, size * inset + box * 0.88)
        draw.line([top, bottom], fill=colour, width=width)
        for end in (top, bottom):  # round caps
            r = width / 2
            draw.ellipse([end[0] - r, end[1] - r, end[0] + r, end[1] + r], fill=colour)


def icon(size: int, *, rounded: bool, inset: float, background: bool = True,
         colour: tuple[int, ...] = WHITE) -> Image.Image:
    big = size * SCALE
    image = Image.new("RGBA", (big, big), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    if background:
        if rounded:
            draw.rounded_rectangle([0, 0, big - 1, big - 1], radius=big * 0.22, fill=ACCENT)
        else:
            draw.rectangle([0, 0, big - 1, big - 1], fill=ACCENT)
    claws(draw, big, inset, colour)
    return image.resize((size, size), Image.Resampling.LANCZOS)


def main() -> None:
    icon(192, rounded=True, inset=0.2).save(STATIC / "icon-192.png", optimize=True)
    icon(512, rounded=True, inset=0.2).save(STATIC / "icon-512.png", optimize=True)
    # maskable: full bleed, the marks inside the central safe zone (a circle of 80%)
    icon(512, rounded=False, inset=0.28).save(STATIC / "icon-maskable-512.png", optimize=True)
    # iOS rounds the corners itself and shows transparency as black: full bleed
    icon(180, rounded=False, inset=0.2).save(STATIC / "apple-touch-icon.png", optimize=True)
    # Android's status-bar badge uses only the alpha channel
    icon(72, rounded=False, inset=0.1, background=False).save(STATIC / "badge-72.png",
                                                               optimize=True)


if __name__ == "__main__":
    main()
