"""Extensions of the UI: a module's `ui_blueprint(home)` mounted at a prefix, behind the guard."""

from __future__ import annotations

import pytest

pytest.importorskip("flask")

from backflip.ui.app import LOOPBACK_NAMES, create_app

EXT = {"/ext": "tests.ui.label_extension"}
HOST = {"Host": "127.0.0.1"}


def test_an_extension_blueprint_is_mounted_inside_the_layout_and_behind_the_guard(home):
    client = create_app(home, allowed_hosts=LOOPBACK_NAMES, extensions=EXT).test_client()
    page = client.get("/ext/", headers=HOST).get_data(as_text=True)
    assert f'<h1 id="labeler">pairs to label in {home}</h1>' in page
    assert 'href="/journal"' in page and "app.js" in page  # the UI's own layout and nav
    ok = client.post("/ext/answer", data={"choice": "left"}, headers=HOST)
    assert ok.get_json() == {"got": "left"}
    cross = client.post(
        "/ext/answer", data={"choice": "left"}, headers={**HOST, "Origin": "http://evil.example"}
    )
    assert cross.status_code == 403
    guarded = create_app(home, token="t0ken-t0ken-t0ken", extensions=EXT).test_client()
    assert guarded.get("/ext/").status_code == 401
    authorized = {"Authorization": "Bearer t0ken-t0ken-t0ken"}
    assert guarded.get("/ext/", headers=authorized).status_code == 200


def test_a_missing_extension_explains_its_mount_point(home):
    client = create_app(
        home, allowed_hosts=LOOPBACK_NAMES, extensions={"/ext": "backflip.nope.web"}
    )
    page = client.test_client().get("/ext/", headers=HOST).get_data(as_text=True)
    assert "mounts here" in page and "backflip.nope.web" in page
    broken = create_app(home, extensions={"/ext": "tests.ui.no_such_helper_module_x"})
    assert broken.test_client().get("/ext/").status_code == 200
