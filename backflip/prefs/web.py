"""The human labeling page: two clips side by side, looping; keys answer which is better.

`make_app(seed_folder)` returns a plain WSGI application, so it can be served on its own
(`serve`, what `backflip label RUN_ID` does, on 127.0.0.1 by default) or mounted under any prefix
of a larger web app (the `backflip ui` server): every URL in the page is relative, and a request
for the bare prefix is redirected to `prefix/`. Routes, relative to the mount point:

    GET  ./                    the page (HTML and CSS)
    GET  ./app.js              its script
    GET  ./api/state           {"query": {id, left, right} | null, labeled, skipped, pending,
                                target, segment_length}
    GET  ./clip/<segment>.png  the segment as a PNG sprite sheet (frames top to bottom)
    POST ./api/answer          {"query": id, "choice": "left"|"right"|"equal"|"skip"}
    POST ./api/undo            make the last answer pending again

Answers are committed to the seed's `prefs.sqlite` before the response is sent, so an answer the
page has acknowledged survives any crash. The trainer (another process) reads them from there.

Keys: ← or A = left is better, → or D = right is better, ↑ or E = equally good,
↓ or S = can't tell (dropped from training), U or Backspace = undo.
"""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import numpy as np

from backflip import jsonout
from backflip.prefs import frames as frames_mod
from backflip.prefs.db import PreferenceDB

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>backflip: which is better?</title>
<style>
 body { font-family: system-ui, sans-serif; margin: 1.5em; background: #fafafa; color: #222; }
 .clips { display: flex; gap: 2em; align-items: flex-start; }
 .clip { text-align: center; }
 canvas { border: 2px solid #888; image-rendering: pixelated; background: #fff; }
 #status { margin: 1em 0; font-size: 1.1em; }
 kbd { border: 1px solid #aaa; border-radius: 3px; padding: 0 .3em; background: #fff; }
 #flash { color: #070; min-height: 1.2em; }
 button { margin: .2em; }
</style></head>
<body>
<h1>Which clip is better?</h1>
<div id="status">loading…</div>
<div class="clips">
 <div class="clip"><canvas id="left" width="240" height="240"></canvas><br>
  <button data-choice="left"><kbd>←</kbd> left is better</button></div>
 <div class="clip"><canvas id="right" width="240" height="240"></canvas><br>
  <button data-choice="right">right is better <kbd>→</kbd></button></div>
</div>
<p><button data-choice="equal"><kbd>↑</kbd> equally good</button>
   <button data-choice="skip"><kbd>↓</kbd> can't tell</button>
   <button id="undo"><kbd>U</kbd> undo</button></p>
<div id="flash"></div>
<script src="app.js"></script>
</body></html>
"""

# a separate file, so the page also works under a Content-Security-Policy without inline scripts
SCRIPT = """"use strict";
let state = null, sheets = {left: null, right: null}, frame = 0, busy = false;
let seq = 0;  // only the newest request's answer is shown (a slow poll must not undo a label)
const FPS = 12;
async function getJSON(url, body) {
  const opts = body === undefined ? {} :
    {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const r = await fetch(url, opts);
  const data = await r.json();
  if (!r.ok) throw new Error(data.error || r.statusText);
  return data;
}
function loadSheet(side, seg) {
  const img = new Image();
  img.onload = () => { sheets[side] = img; };
  img.src = "clip/" + seg + ".png";
}
function show(s) {
  const prev = state && state.query ? state.query.id : null;
  state = s;
  const q = s.query;
  document.getElementById("status").textContent =
    `labeled ${s.labeled} of ${s.target} · skipped ${s.skipped} · pending ${s.pending}` +
    (q ? ` · query #${q.id}` : " · waiting for the trainer to send clips…");
  document.body.dataset.query = q ? q.id : "";
  if (q && q.id !== prev) {
    sheets = {left: null, right: null}; frame = 0;
    loadSheet("left", q.left); loadSheet("right", q.right);
  }
  if (!q) sheets = {left: null, right: null};
}
async function refresh() {
  const mine = ++seq;
  try { const s = await getJSON("api/state"); if (mine === seq) show(s); }
  catch (e) { flash(e.message); }
}
function flash(text) { document.getElementById("flash").textContent = text; }
async function answer(choice) {
  if (busy || !state || !state.query) return;
  busy = true;
  const mine = ++seq;
  try {
    const s = await getJSON("api/answer", {query: state.query.id, choice: choice});
    flash(`saved: ${choice} for #${state.query.id}`);
    if (mine === seq) show(s);
  } catch (e) { flash("not saved: " + e.message); await refresh(); }
  busy = false;
}
async function undo() {
  if (busy) return;
  busy = true;
  const mine = ++seq;
  try {
    const s = await getJSON("api/undo", {});
    flash(s.undone ? `undid #${s.undone}` : "nothing to undo");
    if (mine === seq) show(s);
  }
  catch (e) { flash(e.message); }
  busy = false;
}
function draw() {
  for (const side of ["left", "right"]) {
    const c = document.getElementById(side), ctx = c.getContext("2d"), img = sheets[side];
    ctx.clearRect(0, 0, c.width, c.height);
    if (!img || !state || !state.query) continue;
    const n = state.segment_length, fh = img.height / n, f = frame % n;
    ctx.imageSmoothingEnabled = false;
    ctx.drawImage(img, 0, f * fh, img.width, fh, 0, 0, c.width, c.height);
  }
  frame++;
}
const KEYS = {ArrowLeft: "left", a: "left", ArrowRight: "right", d: "right",
              ArrowUp: "equal", e: "equal", ArrowDown: "skip", s: "skip"};
document.addEventListener("keydown", ev => {
  if (ev.key in KEYS) { ev.preventDefault(); answer(KEYS[ev.key]); }
  else if (ev.key === "u" || ev.key === "Backspace") { ev.preventDefault(); undo(); }
});
document.querySelectorAll("button[data-choice]").forEach(b =>
  b.addEventListener("click", () => answer(b.dataset.choice)));
document.getElementById("undo").addEventListener("click", undo);
setInterval(draw, 1000 / FPS);
setInterval(() => { if (!busy) refresh(); }, 1500);
refresh();
"""

CLIP = re.compile(r"^/clip/(\d+)\.png$")


def make_app(folder: str | Path):
    """The labeling page for one seed folder (holding `prefs.sqlite`) as a WSGI application."""
    db = PreferenceDB(Path(folder) / "prefs.sqlite")
    meta = db.meta()
    env_id = meta.get("env_id", "")
    shape = tuple(int(x) for x in meta.get("obs_shape", "").split(",") if x)
    to_frame = frames_mod.frame_fn(env_id, shape)
    target = int(meta.get("labels_target", 0))
    clips: dict[int, bytes] = {}
    lock = threading.Lock()

    def state() -> dict:
        counts = db.counts()
        q = db.pending(1)
        return {
            "query": {"id": q[0][0], "left": q[0][1], "right": q[0][2]} if q else None,
            "labeled": counts["labeled"],
            "skipped": counts["skipped"],
            "pending": counts["pending"],
            "target": target,
            "segment_length": int(meta.get("segment_length", 1)),
        }

    def clip(seg_id: int) -> bytes:
        with lock:
            if seg_id not in clips:
                seg = db.segment(seg_id)
                clips[seg_id] = frames_mod.png(np.stack([to_frame(o) for o in seg.obs]))
                if len(clips) > 200:
                    clips.pop(next(iter(clips)))
            return clips[seg_id]

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "") or ""
        method = environ.get("REQUEST_METHOD", "GET")

        def reply(status, body, ctype="application/json", headers=()):
            if not isinstance(body, bytes):
                body = jsonout.dumps(body).encode()
            start_response(
                status,
                [
                    ("Content-Type", ctype),
                    ("Content-Length", str(len(body))),
                    ("Cache-Control", "no-store"),
                    *headers,
                ],
            )
            return [body]

        if path == "":  # mounted at /prefix: relative URLs need /prefix/
            target_url = environ.get("SCRIPT_NAME", "") + "/"
            return reply("301 Moved Permanently", b"", "text/plain", [("Location", target_url)])
        if path == "/" and method == "GET":
            return reply("200 OK", PAGE.encode(), "text/html; charset=utf-8")
        if path == "/app.js" and method == "GET":
            return reply("200 OK", SCRIPT.encode(), "text/javascript; charset=utf-8")
        if path == "/api/state" and method == "GET":
            return reply("200 OK", state())
        m = CLIP.match(path)
        if m and method == "GET":
            try:
                return reply("200 OK", clip(int(m.group(1))), "image/png")
            except KeyError:
                return reply("404 Not Found", {"error": "no such segment"})
        if path in ("/api/answer", "/api/undo") and method == "POST":
            try:
                size = int(environ.get("CONTENT_LENGTH") or 0)
                body = json.loads(environ["wsgi.input"].read(size) or b"{}")
            except (ValueError, json.JSONDecodeError):
                return reply("400 Bad Request", {"error": "expected a JSON body"})
            if path == "/api/undo":
                return reply("200 OK", {**state(), "undone": db.undo("human")})
            try:
                db.answer(int(body["query"]), str(body["choice"]), "human")
            except (KeyError, ValueError, TypeError) as e:
                return reply("409 Conflict", {"error": str(e).strip("'\"")})
            return reply("200 OK", state())
        return reply("404 Not Found", {"error": f"no route {method} {path}"})

    app.db = db  # for closing
    return app


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # one line per request is noise while labeling
        pass


def serve(folder: str | Path, host: str = "127.0.0.1", port: int = 8765):
    """A server for the page (not yet serving: call `serve_forever()`); its URL is
    `http://{host}:{server.server_port}/`."""
    return make_server(
        host, port, make_app(folder), server_class=_ThreadingServer, handler_class=_QuietHandler
    )


# --- mounting inside `backflip ui` -----------------------------------------------------------------

QUEUE_PAGE = """{% extends "base.html" %}{% block content %}
<h1>Preference labeling</h1>
{% if rows %}<table><tr><th>run</th><th>env</th><th>seed</th><th>labeled</th><th>pending</th>
<th>target</th><th></th></tr>
{% for r in rows %}<tr><td>{{ r.id }}</td><td>{{ r.env }}</td><td>{{ r.seed }}</td>
<td>{{ r.labeled }}</td><td>{{ r.pending }}</td><td>{{ r.target }}</td>
<td><a href="{{ r.id }}/{{ r.seed }}/">label</a></td></tr>{% endfor %}</table>
{% else %}<p>No preference runs yet: <code>backflip prefs train ALGO --env ENV --labeler human
</code></p>{% endif %}
{% endblock %}"""


def ui_blueprint(home):
    """The labeling pages as a Flask blueprint for `backflip ui` (mounted at /label):

    /label/                         preference runs and their seeds, with pending counts
    /label/<run_id>/<seed>/...      the labeling page of that seed (`make_app`)
    """
    from flask import Blueprint, abort, render_template_string, request
    from werkzeug.wrappers import Response

    from backflip.runs.archive import read_json, run_dirs, seed_dir

    home = Path(home)
    bp = Blueprint("prefs_label", __name__)
    apps: dict[Path, object] = {}

    @bp.get("/")
    def queue():
        rows = []
        for run_dir in reversed(run_dirs(home)):
            try:
                config = read_json(run_dir / "run.json").get("config", {})
            except Exception:  # noqa: BLE001 — a corrupt run.json is shown by the UI elsewhere
                continue
            if "prefs" not in config:
                continue
            for seed in config.get("seeds", []):
                path = seed_dir(run_dir, seed) / "prefs.sqlite"
                if not path.exists():
                    continue
                db = PreferenceDB(path)
                counts = db.counts()
                db.close()
                rows.append(
                    {
                        "id": run_dir.name,
                        "env": config.get("env_id"),
                        "seed": seed,
                        "labeled": counts["labeled"],
                        "pending": counts["pending"],
                        "target": config["prefs"].get("labels"),
                    }
                )
        return render_template_string(QUEUE_PAGE, rows=rows, nav="label")

    @bp.route("/<run_id>/<int:seed>", defaults={"rest": ""}, methods=["GET", "POST"])
    @bp.route("/<run_id>/<int:seed>/", defaults={"rest": "/"}, methods=["GET", "POST"])
    @bp.route("/<run_id>/<int:seed>/<path:rest>", methods=["GET", "POST"])
    def page(run_id, seed, rest):
        folder = seed_dir(home / run_id, seed)
        if "/" in run_id or ".." in run_id or not (folder / "prefs.sqlite").exists():
            abort(404)
        if folder not in apps:
            apps[folder] = make_app(folder)
        environ = dict(request.environ)
        prefix = request.path[: len(request.path) - len(rest)] if rest else request.path
        environ["SCRIPT_NAME"] = prefix.rstrip("/") if rest else prefix
        environ["PATH_INFO"] = ("/" + rest.lstrip("/")) if rest else ""
        return Response.from_app(apps[folder], environ)

    return bp
