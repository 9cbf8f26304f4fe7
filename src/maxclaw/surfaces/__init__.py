"""Surfaces: what settles a card from outside the card — the decisions panel, a notification's
button or reply box (with a bearer token or the notification's action token; a webhook-driven
bridge answers the same way). They sit above components, decisions and push and call down;
nothing below imports them."""
