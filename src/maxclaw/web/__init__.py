"""The WebUI: a static app (vanilla JS modules, no build step) shipped inside the package."""
