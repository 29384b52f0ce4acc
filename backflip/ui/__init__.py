"""The web UI and the static report: every archived run in one place.

- `data.py`   reads the archive for display (no web framework): run rows, live progress, curves
              aligned over seeds with an IQM band, findings, videos, checkpoints, comparisons;
- `render.py` turns that into HTML with Jinja templates (`templates/`), for the server and for
              the static report alike (only the links differ);
- `app.py`    the Flask application: pages, a small JSON API for live updates, artifact files
              (never outside the archive), the guard in front of every route, and extensions;
- `label.py`  the preference labeling pages (`/label`): people answer "which clip is better?"
              for a run that learns its reward from them;
- `static/`   the page script, the style sheet and the vendored uPlot chart library (MIT).

`backflip ui` serves it; `backflip report` writes the same pages as files. See docs/ui.md.
"""
