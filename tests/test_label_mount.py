"""The labeling page mounted inside another web app (`backflip ui` mounts `ui_blueprint` at
/label): routes, relative URLs and answers go through the mount to the same database."""

from __future__ import annotations

import pytest

from backflip.prefs.db import PreferenceDB
from backflip.prefs.web import make_app
from backflip.runs.archive import seed_dir, write_json
from tests.test_prefs import seg

flask = pytest.importorskip("flask", reason="Flask (the UI's web framework) is not installed")


def fake_run(home, run_id="20260101-000000-abcd"):
    run_dir = home / run_id
    folder = seed_dir(run_dir, 0)
    folder.mkdir(parents=True)
    write_json(
        run_dir / "run.json",
        {
            "id": run_id,
            "config": {"env_id": "MovingDotLowDim-v0", "seeds": [0], "prefs": {"labels": 9}},
        },
    )
    db = PreferenceDB(folder / "prefs.sqlite")
    db.set_meta(env_id="MovingDotLowDim-v0", segment_length=1, labels_target=9, obs_shape="2")
    q = db.add_query(seg([1.0]), seg([0.0]), 0, "random")
    db.close()
    return run_id, folder, q


def test_blueprint_lists_runs_and_serves_the_page_under_a_prefix(home):
    from jinja2 import DictLoader

    from backflip.prefs.web import ui_blueprint

    run_id, folder, q = fake_run(home)
    app = flask.Flask("t")
    app.jinja_loader = DictLoader({"base.html": "<nav>ui</nav>{% block content %}{% endblock %}"})
    app.register_blueprint(ui_blueprint(home), url_prefix="/label")
    client = app.test_client()
    listing = client.get("/label/").get_data(as_text=True)
    assert "<nav>ui</nav>" in listing and f'href="{run_id}/0/"' in listing
    bare = client.get(f"/label/{run_id}/0")
    assert bare.status_code == 301 and bare.headers["Location"].endswith(f"/label/{run_id}/0/")
    page = client.get(f"/label/{run_id}/0/").get_data(as_text=True)
    assert '<script src="app.js">' in page  # relative: resolves under the mount
    assert client.get(f"/label/{run_id}/0/app.js").status_code == 200
    state = client.get(f"/label/{run_id}/0/api/state").get_json()
    assert state["query"]["id"] == q and state["target"] == 9
    png = client.get(f"/label/{run_id}/0/clip/{state['query']['left']}.png")
    assert png.status_code == 200 and png.data.startswith(b"\x89PNG")
    answered = client.post(f"/label/{run_id}/0/api/answer", json={"query": q, "choice": "right"})
    assert answered.get_json()["labeled"] == 1
    assert PreferenceDB(folder / "prefs.sqlite").labels()[0][3] == 0.0
    assert client.get("/label/nope/0/").status_code == 404


def test_standalone_app_refuses_bad_answers(home):
    from werkzeug.test import Client

    _, folder, q = fake_run(home)
    client = Client(make_app(folder))
    assert client.post("/api/answer", json={"query": q, "choice": "sideways"}).status_code == 409
    assert client.post("/api/answer", data="not json").status_code == 400
    assert client.post("/api/answer", json={"query": q, "choice": "left"}).status_code == 200
    assert client.post("/api/answer", json={"query": q, "choice": "left"}).status_code == 409
    assert client.post("/api/undo", json={}).get_json()["undone"] == q


def test_the_real_ui_mounts_the_labeling_pages_at_label(home):
    pytest.importorskip("backflip.ui.app")
    from backflip.ui.app import LOOPBACK_NAMES, create_app

    run_id, _, q = fake_run(home)
    client = create_app(home, allowed_hosts=LOOPBACK_NAMES).test_client()
    host = {"Host": "127.0.0.1"}
    listing = client.get("/label/", headers=host).get_data(as_text=True)
    assert f'href="{run_id}/0/"' in listing and 'href="/journal"' in listing  # inside the layout
    page = client.get(f"/label/{run_id}/0/", headers=host)
    assert page.status_code == 200 and b'<script src="app.js">' in page.data
    assert client.get(f"/label/{run_id}/0/app.js", headers=host).status_code == 200
    origin = {**host, "Origin": "http://127.0.0.1"}
    ok = client.post(
        f"/label/{run_id}/0/api/answer", json={"query": q, "choice": "left"}, headers=origin
    )
    assert ok.status_code == 200 and ok.get_json()["labeled"] == 1
