"""The web application behind `backflip ui` (Flask; one process, threaded, read-mostly).

Routes (HTML unless noted):

    /                               runs index: filter by env, algo, status, tag, text; sortable
    /runs/<id>                      one run: command, config, provenance, logs, curves, findings,
                                    videos, checkpoints, notes
    /compare?ids=A,B[&metric=M]     runs side by side: curves with intervals, verdicts
        [&peer=DIR[@ENV]]           ...and an SB3/CleanRL TensorBoard logdir inside the archive
    /journal[?since=7d&cpu_price=]  the lab journal with compute accounting; POST /journal/note
    /files/<id>/<path>              an artifact of a run (videos, checkpoints, logs); never a file
                                    outside the archive
    /label/                         preference labeling: runs, and a page per seed where people
                                    answer "which clip is better?" (`backflip/ui/label.py`)
    /api/progress?ids=A,B           JSON: live progress of runs (the index polls it)
    /api/runs/<id>/progress         JSON: live progress of one run, per seed
    /api/runs/<id>/curves[?names=]  JSON: every metric aligned over seeds, with the IQM band
    /api/runs/<id>/findings         JSON: the doctor's findings.json

Security: `serve` binds 127.0.0.1 unless told otherwise. On a loopback address the Host header
must name the loopback too (a web page elsewhere can't reach the server through DNS rebinding);
on any other address a token is required (generated and printed unless given), accepted once
as `?token=` (then kept in an HttpOnly cookie) or as `Authorization: Bearer`. State-changing
requests (POST) must come from the same origin. Artifact paths are resolved and must stay inside
the archive.

Extending: `create_app(..., extensions={"/prefix": "module"})` mounts `module.ui_blueprint(home)`
(a flask.Blueprint) at /prefix; its templates can `{% extends "base.html" %}` (`links`, `live`
and `nav` are in their context). `backflip label RUN` serves this app and prints the URL of the
run's labeling page.
"""

from __future__ import annotations

import hmac
import importlib
import ipaddress
import mimetypes
import os
import re
import secrets
import socket
import sys
import threading
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from backflip.errors import UserError
from backflip.runs.layout import RUN_JSON
from backflip.ui import data, label
from backflip.ui.render import STATIC, TEMPLATES, ServerLinks, index_rows, render

RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1"}
TOKEN_COOKIE = "backflip_token"
INDEX_LIMIT = 1000
EXTENSIONS: dict[str, str] = {}  # url prefix -> module defining ui_blueprint(home)
TEXT_TYPES = {".log", ".txt", ".patch", ".csv", ".json", ".md", ".yaml", ".yml", ".toml"}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; media-src 'self'; connect-src 'self'; frame-ancestors 'none'"
)


def is_loopback(host: str) -> bool:
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _hostname(host_header: str) -> str:
    """'127.0.0.1:8765' -> '127.0.0.1'; '[::1]:80' -> '::1'."""
    if host_header.startswith("["):
        return host_header[1:].split("]", 1)[0]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


# --- the guard: token, Host check, same-origin writes, security headers ---------------------------


class Guard:
    """WSGI middleware in front of everything, the mounted extensions included."""

    def __init__(self, app, token: str | None, allowed_hosts: set[str] | None):
        self.app, self.token, self.allowed_hosts = app, token, allowed_hosts

    def __call__(self, environ, start_response):
        def with_headers(status, headers, exc_info=None):
            headers = [*headers]
            names = {k.lower() for k, _ in headers}
            for k, v in (
                ("X-Content-Type-Options", "nosniff"),
                ("X-Frame-Options", "DENY"),
                ("Referrer-Policy", "same-origin"),  # "no-referrer" would make Origin "null"
                ("Content-Security-Policy", CSP),
            ):
                if k.lower() not in names:
                    headers.append((k, v))
            return start_response(status, headers, exc_info)

        host = _hostname(environ.get("HTTP_HOST", ""))
        if self.allowed_hosts is not None and host not in self.allowed_hosts:
            return _plain(with_headers, "403 Forbidden", f"unexpected Host header {host!r}\n")
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD", "OPTIONS"):
            origin = environ.get("HTTP_ORIGIN")
            here = f"{environ.get('wsgi.url_scheme', 'http')}://{environ.get('HTTP_HOST', '')}"
            if origin and origin.rstrip("/").lower() != here.lower():  # scheme, host and port
                return _plain(with_headers, "403 Forbidden", "cross-origin request refused\n")
            if environ.get("HTTP_SEC_FETCH_SITE") not in (None, "same-origin", "none"):
                return _plain(with_headers, "403 Forbidden", "cross-site request refused\n")
        if self.token:
            query = parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
            given = dict(query).get("token")
            if given is not None and hmac.compare_digest(given, self.token):
                rest = urlencode([(k, v) for k, v in query if k != "token"])
                location = environ.get("PATH_INFO", "/") + (f"?{rest}" if rest else "")
                cookie = f"{TOKEN_COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
                with_headers("303 See Other", [("Location", location), ("Set-Cookie", cookie)])
                return [b""]
            if not self._authorized(environ):
                return _plain(
                    with_headers,
                    "401 Unauthorized",
                    "this backflip ui needs its token: open the URL that `backflip ui` printed\n",
                )
        return self.app(environ, with_headers)

    def _authorized(self, environ) -> bool:
        auth = environ.get("HTTP_AUTHORIZATION", "")
        if auth.startswith("Bearer ") and hmac.compare_digest(auth[7:].strip(), self.token):
            return True
        cookie = SimpleCookie()
        try:
            cookie.load(environ.get("HTTP_COOKIE", ""))
        except Exception:  # noqa: BLE001 — a malformed cookie header is just "no token"
            return False
        morsel = cookie.get(TOKEN_COOKIE)
        return morsel is not None and hmac.compare_digest(morsel.value, self.token)


def _plain(start_response, status: str, text: str):
    body = text.encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))]
    )
    return [body]


# --- the application ----------------------------------------------------------------------------------


def create_app(
    home: Path,
    token: str | None = None,
    allowed_hosts: set[str] | None = None,
    extensions: dict[str, str] | None = None,
):
    """The Flask app for the archive at `home`, wrapped in the `Guard`.

    `extensions` maps URL prefixes to modules defining `ui_blueprint(home)` (default
    `EXTENSIONS`).
    """
    try:
        from flask import Flask, Response, abort, jsonify, redirect, request, send_file
        from flask.json.provider import DefaultJSONProvider
    except ImportError:
        raise UserError("the UI needs Flask: pip install 'backflip[ui]'") from None
    from backflip import jsonout
    from backflip.runs import index

    home = Path(home)
    index.ensure(home)
    links = ServerLinks()

    class JSONOut(DefaultJSONProvider):
        """`jsonify` and the `tojson` of mounted blueprints' templates: `backflip.jsonout`."""

        sort_keys = False

        def dumps(self, obj, **kwargs) -> str:
            return jsonout.dumps(obj, **kwargs)

    class App(Flask):
        json_provider_class = JSONOut

    app = App(
        "backflip.ui",
        static_folder=str(STATIC),
        static_url_path="/static",
        template_folder=str(TEMPLATES),
    )
    app.config["BACKFLIP_HOME"] = home
    app.url_map.merge_slashes = False  # `//etc/passwd` reaches the path check, not a redirect

    @app.context_processor
    def _context():  # for templates of mounted blueprints that extend base.html
        from backflip import __version__

        return {"links": links, "live": True, "version": __version__, "nav": "label"}

    def page(template: str, **context):
        return Response(render(template, links, **context), mimetype="text/html")

    def run_dir(run_id: str) -> Path:
        d = home / run_id
        if not RUN_ID.match(run_id) or not (d / RUN_JSON).is_file():
            abort(404, f"no run {run_id!r} in {home}")
        return d

    @app.errorhandler(UserError)
    def _user_error(e):
        return Response(f"error: {e}\n", status=404, mimetype="text/plain")

    # -- pages --------------------------------------------------------------------------------

    @app.get("/")
    def index_page():
        filters = {k: request.args.get(k, "") for k in ("env", "algo", "status", "tag", "q")}
        limit = request.args.get("limit", type=int) or INDEX_LIMIT
        rows = index.query(
            home,
            env=filters["env"] or None,
            algo=filters["algo"] or None,
            status=filters["status"] or None,
            tag=filters["tag"] or None,
            grep=filters["q"] or None,
        )
        total = len(rows)
        return page(
            "index.html",
            nav="runs",
            rows=rows[:limit],
            rows_html=index_rows(rows[:limit], links),
            total=total,
            truncated=total > limit,
            filters=filters,
            choices=data.choices(home),
            home=str(home),
        )

    @app.get("/runs/<run_id>")
    def run_page(run_id):
        d = run_dir(run_id)
        detail = data.run_detail(d)
        boot = {
            "run": run_id,
            "status": detail["record"]["status"],
            "curves_url": f"/api/runs/{run_id}/curves",
            "progress_url": f"/api/runs/{run_id}/progress",
            "findings_url": f"/api/runs/{run_id}/findings",
        }
        return page("run.html", nav="runs", d=detail, boot=boot)

    @app.get("/compare")
    def compare_page():
        ids = [i for i in request.args.get("ids", "").replace(" ", ",").split(",") if i]
        ids += [i for i in request.args.getlist("id") if i not in ids]
        metric = request.args.get("metric") or None
        c, error = None, None
        dirs: list = []
        for i in ids:
            d = home / i
            if RUN_ID.match(i) and (d / RUN_JSON).is_file():
                dirs.append(d)
            else:
                error = f"no run {i!r} in {home}"
        for p in request.args.getlist("peer"):
            # another library's logs, read only from inside the archive (no path escapes it)
            from backflip.experiments.compare import is_peer

            rel = p.rsplit("@", 1)[0]
            inside = not Path(rel).is_absolute() and ".." not in Path(rel).parts
            if inside and is_peer(str(home / p)):
                dirs.append(str(home / p))
            else:
                error = f"no SB3 or CleanRL TensorBoard logs at {p!r} in {home}"
        if dirs:
            try:
                c = data.compare(home, dirs, metric)
            except UserError as e:  # the same run twice, too many runs
                error = str(e)
            else:
                error = error or c["error"]
        env = c["sides"][0]["env"] if c else None
        candidates = index.query(home, env=env, limit=200) or index.query(home, limit=200)
        boot = {"compare": c}
        return page(
            "compare.html",
            nav="compare",
            c=c,
            ids=[d.name for d in dirs if isinstance(d, Path)],
            error=error,
            candidates=candidates,
            boot=boot,
        )

    @app.get("/journal")
    def journal_page():
        from backflip.journal import KINDS, build, parse_since, prices_from_env

        since_text = request.args.get("since", "")
        env_cpu, env_gpu = prices_from_env()
        cpu = request.args.get("cpu_price", type=float)
        gpu = request.args.get("gpu_price", type=float)
        j = build(
            home,
            parse_since(since_text) if since_text else None,
            cpu if cpu is not None else env_cpu,
            gpu if gpu is not None else env_gpu,
        )
        return page("journal.html", nav="journal", j=j, kinds=KINDS, since_text=since_text)

    @app.post("/journal/note")
    def add_note():
        from backflip.journal import add_note as add

        run = (request.form.get("run") or "").strip() or None
        if run is not None:
            run = run_dir(run).name
        add(home, request.form.get("text", ""), request.form.get("kind", "thought"), run)
        return redirect("/journal", code=303)

    @app.get("/files/<run_id>/<path:rel>")
    def artifact(run_id, rel):
        d = run_dir(run_id)
        path = safe_artifact(home, d, rel)
        if path is None:
            abort(404)
        suffix = path.suffix.lower()
        if suffix in TEXT_TYPES:
            mimetype = "text/plain; charset=utf-8"
        else:
            mimetype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
            if not mimetype.startswith(("video/", "image/")):
                mimetype = "application/octet-stream"
        return send_file(
            path,
            mimetype=mimetype,
            conditional=True,  # Range requests: videos seek
            as_attachment=mimetype == "application/octet-stream",
            max_age=0,
        )

    # -- JSON ---------------------------------------------------------------------------------

    @app.get("/api/about")
    def api_about():  # lets `backflip label` find a UI of this archive already listening
        from backflip import __version__

        return jsonify({"app": "backflip ui", "home": str(home), "version": __version__})

    @app.get("/api/runs")
    def api_runs():
        rows = index.query(home, limit=request.args.get("limit", type=int) or INDEX_LIMIT)
        for r in rows:
            r.pop("record", None)
        return jsonify(rows)

    @app.get("/api/progress")
    def api_progress():
        ids = [i for i in request.args.get("ids", "").split(",") if i][:200]
        out = []
        for i in ids:
            d = home / i
            if RUN_ID.match(i) and (d / RUN_JSON).is_file():
                try:
                    out.append(data.run_progress(d))
                except UserError:
                    continue
        return jsonify({"runs": out})

    @app.get("/api/runs/<run_id>/progress")
    def api_run_progress(run_id):
        return jsonify(data.run_progress(run_dir(run_id)))

    @app.get("/api/runs/<run_id>/curves")
    def api_curves(run_id):
        names = request.args.get("names")
        return jsonify(data.run_curves(run_dir(run_id), names.split(",") if names else None))

    @app.get("/api/runs/<run_id>/findings")
    def api_findings(run_id):
        from backflip.doctor.findings import read_findings  # scipy: when asked, not at start

        return jsonify(read_findings(run_dir(run_id)))

    app.register_blueprint(label.blueprint(home, page, run_dir), url_prefix="/label")
    _mount_extensions(app, home, page, EXTENSIONS if extensions is None else extensions)
    app.wsgi_app = Guard(app.wsgi_app, token, allowed_hosts)
    return app


def safe_artifact(home: Path, run_dir: Path, rel: str) -> Path | None:
    """The file `rel` inside `run_dir`, or None if it is missing or resolves outside the archive.

    Refuses absolute paths, `..` segments, backslashes and NUL; then resolves symlinks and checks
    the real path is still under the archive root (a symlink can't lead out either).
    """
    if not rel or "\x00" in rel or "\\" in rel or rel.startswith("/"):
        return None
    if any(part in ("..", "") for part in rel.split("/")):
        return None
    try:
        path = (run_dir / rel).resolve(strict=True)
        root = home.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    if not path.is_relative_to(root) or not path.is_file():
        return None
    return path


def _mount_extensions(app, home: Path, page, extensions: dict[str, str]) -> None:
    """Register `ui_blueprint(home)` of each extension module, or a placeholder page."""
    for prefix, module in extensions.items():
        error = None
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name is None or not module.startswith(e.name):
                error = f"{type(e).__name__}: {e}"
            mod = None
        except Exception as e:  # noqa: BLE001 — a broken extension must not take the UI down
            error = f"{type(e).__name__}: {e}"
            mod = None
        if mod is not None and hasattr(mod, "ui_blueprint"):
            app.register_blueprint(mod.ui_blueprint(home), url_prefix=prefix)
            continue
        if error:
            print(f"backflip ui: {module} failed to load: {error}", file=sys.stderr)

        def placeholder(error=error, module=module):
            return page("extension.html", nav=None, error=error, module=module)

        app.add_url_rule(f"{prefix}/", f"placeholder{prefix.replace('/', '_')}", placeholder)


# --- serving ------------------------------------------------------------------------------------------


def _warm_up() -> None:
    from backflip.algos import ALGOS, get_algo

    for name in ALGOS:
        try:
            get_algo(name)
        except Exception:  # noqa: BLE001 — only a warm-up; the page reports real errors
            pass


def running_ui(home: Path, host: str, port: int) -> str | None:
    """The base URL of a `backflip ui` of this archive already listening at host:port, if any."""
    import json
    import urllib.request

    shown = f"[{host.strip('[]')}]" if ":" in host else host
    url = f"http://{shown}:{port}/"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never via a proxy
    try:
        with opener.open(url + "api/about", timeout=2) as r:
            about = json.loads(r.read())
    except (OSError, ValueError):
        return None
    same = about.get("app") == "backflip ui" and Path(about.get("home", "")) == Path(home)
    return url if same else None


def reachable_host(host: str) -> str:
    """The address to print for a server bound to `host`: a wildcard (0.0.0.0, ::) listens on
    every interface, but is no address a colleague can open: this machine's first address
    that is not loopback, else its name."""
    if host.strip("[]") not in ("0.0.0.0", "::", ""):
        return host.strip("[]")
    name = socket.gethostname()
    try:
        infos = socket.getaddrinfo(name, None, socket.AF_INET)
    except OSError:
        return name
    for *_, addr in infos:
        if not addr[0].startswith("127."):
            return addr[0]
    return name


def serve(
    home: Path,
    host: str = "127.0.0.1",
    port: int = 8765,
    token: str | None = None,
    app=None,
    on_ready=None,
    path: str = "/",
) -> None:
    """Serve the archive until Ctrl-C. A non-loopback `host` always gets a token.

    `path` is the page the printed URL opens (`backflip label RUN` can serve the whole UI and
    print the URL of its page under /label/).
    """
    from werkzeug.serving import WSGIRequestHandler, make_server

    loopback = is_loopback(host)
    if not loopback and not token:
        token = secrets.token_urlsafe(24)
    allowed = (LOOPBACK_NAMES | {host.strip("[]")}) if loopback else None
    if app is None:
        app = create_app(home, token=token, allowed_hosts=allowed)

    class QuietHandler(WSGIRequestHandler):
        def log_request(self, code="-", size="-"):  # one line per request is noise here
            if str(code).startswith("5"):
                super().log_request(code, size)

    # Bind here, not in werkzeug (which prints and exits on a busy port): one clear error line.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(128)
    except OSError as e:
        sock.close()
        raise UserError(
            f"cannot listen on {host}:{port}: {e.strerror or e} (choose another --port, or 0 for any)"
        ) from None
    port = sock.getsockname()[1]  # the real one when asked for 0
    server = make_server(
        host,
        port,
        app,
        threaded=True,
        request_handler=QuietHandler,
        fd=sock.fileno(),
    )
    sock.close()  # the server holds its own duplicate of the socket
    reach = reachable_host(host)
    shown = f"[{reach}]" if ":" in reach else reach
    url = f"http://{shown}:{port}{path}"
    if token:
        url += ("&" if "?" in path else "?") + f"token={token}"
    print(f"backflip ui: serving {home} at {url}", flush=True)
    if not loopback:
        print(
            "  listening beyond this machine: anyone who can reach it needs the token above",
            flush=True,
        )
    print("  Ctrl-C to stop", flush=True)
    if on_ready is not None:
        on_ready(server, url)
    # The run page's reproduce command resolves configs, which imports torch (seconds): warm up
    warm = threading.Thread(target=_warm_up, daemon=True)
    warm.start()
    interrupted = False
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        interrupted = True
    finally:
        server.server_close()
    if interrupted and warm.is_alive():
        # Ctrl-C while the warm-up still imports torch: the interpreter's exit would wait for
        # the import to let go (seconds, tens of them on a loaded machine). Nothing is pending:
        # every answer was committed before it was acknowledged, and the socket is closed.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
