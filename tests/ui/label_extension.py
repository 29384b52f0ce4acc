"""A minimal UI extension: a blueprint with a page in the UI's layout and a POST route."""

from __future__ import annotations

from flask import Blueprint, render_template_string, request


def ui_blueprint(home):
    bp = Blueprint("test_label", __name__)

    @bp.get("/")
    def queue():
        return render_template_string(
            '{% extends "base.html" %}{% block content %}<h1 id="labeler">pairs to label in '
            "{{ home }}</h1>{% endblock %}",
            home=str(home),
        )

    @bp.post("/answer")
    def answer():
        return {"got": request.form.get("choice")}

    return bp
