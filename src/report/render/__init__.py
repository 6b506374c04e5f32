"""Rendering: the whole report as a terminal text, report.md (and the verdict MLflow shows on the
sweep's run) and report.html, from one Analysis; `sections` walks its sections once for all of them."""
