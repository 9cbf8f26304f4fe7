"""A person's own settings (issue 29): locale, time zone, quiet hours, and Main's defaults."""
