"""The preference labeling pages of `backflip ui` (a Flask blueprint mounted at /label).

    GET  /label/                                preference runs and their seeds, with counts
    GET  /label/<run>/<seed>/                   the page: two clips loop side by side
    GET  /label/<run>/<seed>/api/state?person=  the next pair for that person, the run's state
                                                (training / waiting for you / finished), labels
                                                given and needed, the person's pace and ETA,
                                                the reward model's validation accuracy, and how
                                                often the person agrees with the true reward
    GET  /label/<run>/<seed>/clip/<segment>.png a segment as a PNG sprite sheet (frames stacked)
    POST /label/<run>/<seed>/api/answer         {"query", "choice": left|right|equal|skip, "person",
                                                "answer_id"}: an answer sent twice is kept once
    POST /label/<run>/<seed>/api/undo           {"person", "query", "anyway"}: take back their
                                                answer to `query` (the page sends its last
                                                ones, this sitting's only); one the reward model
                                                trained on already is refused unless `anyway`
    POST /label/<run>/<seed>/api/end            {"person"}: end labeling; the run trains on with
                                                the labels it has (recorded with who and when)

Answers are committed to the seed's `prefs.sqlite` before the response is sent, so an answer
the page has acknowledged survives any crash; the trainer (another process) reads them from
there. They are refused, with the reason, once the seed is not training any more (finished,
failed, interrupted, or its process gone) or labeling was ended. The page runs behind the UI's
guard like every route (token off loopback, Host and Origin checks, CSP); its POST routes take
JSON only, which a cross-site form cannot send.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from pathlib import Path

import numpy as np

from backflip import jsonout
from backflip.prefs import frames as frames_mod
from backflip.prefs.db import CHOICES, AlreadyTrained, PreferenceDB
from backflip.prefs.people import person_summary
from backflip.prefs.phases import POLICY_STEPS
from backflip.returns import is_preference_run
from backflip.runs.archive import pid_alive, read_record, run_dirs, seed_status
from backflip.runs.layout import METRICS, PREFS_DB, seed_dir
from backflip.summary import status_text
from backflip.ui.data import last_metrics_row

PERSON = re.compile(r"^[\w .@-]{1,40}$")
VIEW_S = 60.0  # a pair shown to one person is offered to others only after this long


class SeedLabeling:
    """One seed's labeling: its database, clips, who is looking at which pair, its state."""

    def __init__(self, run_dir: Path, seed: int):
        self.run_dir, self.seed = run_dir, seed
        self.folder = seed_dir(run_dir, seed)
        self.db = PreferenceDB(self.folder / PREFS_DB)
        meta = self.db.meta()
        shape = tuple(int(x) for x in meta.get("obs_shape", "").split(",") if x)
        self.to_frame = frames_mod.frame_fn(meta.get("env_id", ""), shape)
        self.segment_length = int(meta.get("segment_length", 1))
        # a clip as shown: a frame of every `stride`-th step, played at the env's real speed
        self.stride = int(meta.get("clip_stride", 1))
        self.clip_frames = -(-self.segment_length // self.stride)
        self.fps = float(meta.get("fps", 12))  # frames a second
        self.target = int(meta.get("labels_target", 0))
        self.task = meta.get("task", "")
        self.steps_total = int(read_record(run_dir)["config"]["steps"])
        self.clips: dict[int, bytes] = {}
        self.shown: dict[tuple[str, int], float] = {}  # (person, query) -> first shown
        self.viewing: dict[int, tuple[str, float]] = {}  # query -> (person, when)
        self.lock = threading.Lock()

    # -- the run's side ----------------------------------------------------------------------

    def run_state(self) -> dict:
        """What the trainer of this seed is doing, and whether answers are still used."""
        st = seed_status(self.run_dir, self.seed)
        state = st.get("status", "starting")
        gone = (
            state in ("running", "waiting")
            and st.get("host") == socket.gethostname()
            and not pid_alive(st.get("pid"))
        )
        ended = self.ended()
        step = st.get("steps") or 0
        sps = None
        if state in ("running", "waiting"):
            last, row = last_metrics_row(self.folder / METRICS)
            step = last or step
            if st.get("phase") in POLICY_STEPS:  # exploring: its progress is newer than a row
                step = max(step, st.get("done") or 0)
            sps = row.get("time/sps")
        where = f"step {step:,} of {self.steps_total:,}"
        # the run's ETA: a long phase's own (gathering clips, pretraining), else the steps left
        # at the policy's pace (not while it waits for the person)
        eta = st.get("eta_s") if st.get("phase") else None
        if eta is None and state == "running" and sps and not st.get("phase"):
            eta = max(0, self.steps_total - step) / sps
        if gone:
            state, text = "stopped", f"stopped: the trainer's process ({st.get('pid')}) is gone"
            eta = None
        elif ended:
            text = f"labeling ended by {ended['by'] or 'someone'}: the run trains on ({where})"
        elif state == "waiting" and step == 0:
            n = st.get("labels_needed")
            text = (
                f"waiting for your first labels: {n} more before the policy starts "
                f"(then {self.steps_total:,} steps)"
            )
        elif state == "waiting":
            text = f"{status_text(st).replace('waiting for', 'waiting for you: give')} to go on ({where})"
        elif state == "running" and st.get("phase"):  # gathering, exploring, pretraining
            trains = step or st.get("phase") in POLICY_STEPS
            before = "" if trains else ": before the policy trains"
            text = f"{status_text(st)}{before} ({where})"
        elif state == "running":
            text = f"training ({where}); your answers are used as they arrive"
        elif state == "finished":
            text = "finished: answers are no longer used"
        else:
            text = f"{state}: answers are no longer used"
        accepts = state in ("running", "waiting") and not gone and not ended
        return {
            "state": state,
            "text": text,
            "accepts": accepts,
            "step": step,
            "steps_total": self.steps_total,
            "labels_needed": st.get("labels_needed"),
            "phase": st.get("phase"),
            "eta_s": eta,
        }

    def ended(self) -> dict | None:
        meta = self.db.meta()
        if "labels_ended_at" not in meta:
            return None
        return {"by": meta.get("labels_ended_by", ""), "at": float(meta["labels_ended_at"])}

    def refusal(self) -> str | None:
        """Why an answer would not be used now (None: it would)."""
        run = self.run_state()
        if run["accepts"]:
            return None
        name = f"run {self.run_dir.name} seed {self.seed}"
        if run["state"] == "stopped":
            return f"{name} is not training any more (its process is gone): answers are not used"
        if self.ended():
            return f"labeling of {name} was ended: it trains on with the labels it has"
        return f"{name} is {run['state']}: answers are no longer used"

    # -- a person's side ---------------------------------------------------------------------

    def next_query(self, person: str) -> tuple[int, int, int] | None:
        """The oldest pair this person has not answered, preferring pairs nobody else is
        looking at (two people labeling one run get different pairs)."""
        now = time.time()
        candidates = self.db.next_queries(person)
        with self.lock:
            free = [
                q
                for q in candidates
                if (v := self.viewing.get(q[0])) is None or v[0] == person or now - v[1] > VIEW_S
            ]
            q = (free or candidates or [None])[0]
            if q is not None:
                self.viewing[q[0]] = (person, now)
                self.shown.setdefault((person, q[0]), now)
        return q

    def state(self, person: str) -> dict:
        counts = self.db.counts()
        run = self.run_state()
        q = self.next_query(person) if run["accepts"] else None
        answered = counts["labeled"] + counts["skipped"]
        me = person_summary(self.db.answers(), person)
        remaining = max(0, self.target - answered)
        val_acc = self.db.meta().get("val_acc")
        return {
            "query": {"id": q[0], "left": q[1], "right": q[2]} if q else None,
            "person": person,
            "task": self.task,
            "run": run,
            "labeled": counts["labeled"],
            "skipped": counts["skipped"],
            "pending": counts["pending"],
            "answered": answered,
            "target": self.target,
            "me": me,
            "eta_s": 60 * remaining / me["per_minute"]
            if me["per_minute"] and run["accepts"]
            else None,
            "val_acc": float(val_acc) if val_acc is not None else None,
            "ended": self.ended(),
            "segment_length": self.segment_length,
            "clip_frames": self.clip_frames,
            "fps": self.fps,
        }

    def answer(self, person: str, query: int, choice: str, answer_id: str | None = None) -> None:
        with self.lock:
            shown = self.shown.pop((person, query), None)
            self.viewing.pop(query, None)
        self.db.answer(query, choice, person, shown_at=shown, answer_id=answer_id)

    def undo(self, person: str, query: int | None, anyway: bool = False) -> dict:
        """Take back `person`'s answer to `query` (the page keeps the last few of this sitting):
        refused, saying so, when the reward model has trained on it already, unless `anyway`."""
        trained = self.db.meta().get("trained_at")
        try:
            undone = self.db.undo(
                person, query, None if anyway or trained is None else float(trained)
            )
        except AlreadyTrained as e:
            return {"undone": None, "trained": e.query}
        return {"undone": undone, "trained": None}

    def end(self, person: str) -> None:
        if self.ended() is None:
            self.db.set_meta(labels_ended_at=time.time(), labels_ended_by=person)

    def clip(self, seg_id: int) -> bytes:
        """A clip as one PNG, its frames stacked top to bottom: the env's own rendered frames
        where the run recorded them (a person labels it), else frames drawn from the stored
        observations (`prefs/frames.py`)."""
        with self.lock:
            if seg_id not in self.clips:
                rendered = self.db.clip(seg_id)
                if rendered is None:
                    seg = self.db.segment(seg_id)
                    shown = seg.obs[:: self.stride]
                    rendered = frames_mod.png(np.stack([self.to_frame(o) for o in shown]))
                self.clips[seg_id] = rendered
                if len(self.clips) > 200:
                    self.clips.pop(next(iter(self.clips)))
            return self.clips[seg_id]


def preference_seeds(home: Path) -> list[dict]:
    """Every seed of every preference run that has a database, newest run first."""
    rows = []
    for run_dir in reversed(run_dirs(home)):
        try:
            config = read_record(run_dir).get("config", {})
        except Exception:  # noqa: BLE001 — a corrupt run.json is shown by the UI elsewhere
            continue
        if not is_preference_run(config):
            continue
        for seed in config.get("seeds", []):
            path = seed_dir(run_dir, seed) / PREFS_DB
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
                    "labeler": config["prefs"].get("labeler"),
                    "status": status_text(seed_status(run_dir, seed)),
                    "labeled": counts["labeled"],
                    "pending": counts["pending"],
                    "target": config["prefs"].get("labels"),
                }
            )
    return rows


def blueprint(home: Path, page, run_dir_of):
    """The /label pages; `page(template, **context)` renders inside the UI's layout and
    `run_dir_of(run_id)` resolves a run id (404 otherwise), as the UI's other routes do."""
    from flask import Blueprint, Response, abort, request

    bp = Blueprint("label", __name__)
    seeds: dict[tuple[str, int], SeedLabeling] = {}
    lock = threading.Lock()

    def labeling(run_id: str, seed: int) -> SeedLabeling:
        run_dir = run_dir_of(run_id)
        if not (seed_dir(run_dir, seed) / PREFS_DB).exists():
            abort(404, f"no preference database for run {run_id} seed {seed}")
        with lock:
            if (run_id, seed) not in seeds:
                seeds[run_id, seed] = SeedLabeling(run_dir, seed)
            return seeds[run_id, seed]

    def reply(body: dict, status: int = 200):
        return Response(jsonout.dumps(body), status, mimetype="application/json")

    def person_of(value) -> str:
        person = str(value or "").strip()
        if not PERSON.match(person):
            abort(reply({"error": "say who you are: a name of 1-40 letters, digits, . _ - @"}, 400))
        return person

    def body() -> dict:
        if request.mimetype != "application/json":  # a cross-site form cannot send JSON
            abort(reply({"error": "expected a JSON body (Content-Type: application/json)"}, 415))
        data = request.get_json(silent=True)
        if not isinstance(data, dict):
            abort(reply({"error": "expected a JSON object"}, 400))
        return data

    @bp.get("/")
    def queue():
        return page("label.html", nav="label", rows=preference_seeds(home))

    @bp.get("/<run_id>/<int:seed>")
    def bare(run_id, seed):
        return Response("", 301, headers={"Location": f"{request.path}/"})

    @bp.get("/<run_id>/<int:seed>/")
    def label_page(run_id, seed):
        s = labeling(run_id, seed)
        return page("label_page.html", nav="label", run_id=run_id, seed=seed, task=s.task)

    @bp.get("/<run_id>/<int:seed>/api/state")
    def api_state(run_id, seed):
        return reply(labeling(run_id, seed).state(person_of(request.args.get("person"))))

    @bp.get("/<run_id>/<int:seed>/clip/<int:segment>.png")
    def clip(run_id, seed, segment):
        try:
            png = labeling(run_id, seed).clip(segment)
        except KeyError:
            return reply({"error": "no such segment"}, 404)
        return Response(png, mimetype="image/png", headers={"Cache-Control": "max-age=3600"})

    @bp.post("/<run_id>/<int:seed>/api/answer")
    def api_answer(run_id, seed):
        s, data = labeling(run_id, seed), body()
        person = person_of(data.get("person"))
        if (why := s.refusal()) is not None:
            return reply({"error": why}, 409)
        choice = data.get("choice")
        if choice not in CHOICES:
            return reply({"error": f"choice must be one of {', '.join(CHOICES)}"}, 400)
        answer_id = data.get("answer_id")
        if answer_id is not None and (not isinstance(answer_id, str) or len(answer_id) > 64):
            return reply({"error": "answer_id must be text of at most 64 characters"}, 400)
        try:
            s.answer(person, int(data.get("query")), choice, answer_id)
        except (KeyError, TypeError, ValueError) as e:
            return reply({"error": str(e).strip("'\"")}, 409)
        return reply(s.state(person))

    @bp.post("/<run_id>/<int:seed>/api/undo")
    def api_undo(run_id, seed):
        s, data = labeling(run_id, seed), body()
        person = person_of(data.get("person"))
        if (why := s.refusal()) is not None:
            return reply({"error": why}, 409)
        query = data.get("query")
        if query is not None and (isinstance(query, bool) or not isinstance(query, int)):
            return reply({"error": "query must be a whole number"}, 400)
        return reply({**s.state(person), **s.undo(person, query, bool(data.get("anyway")))})

    @bp.post("/<run_id>/<int:seed>/api/end")
    def api_end(run_id, seed):
        s, data = labeling(run_id, seed), body()
        person = person_of(data.get("person"))
        if (why := s.refusal()) is not None:
            return reply({"error": why}, 409)
        s.end(person)
        return reply(s.state(person))

    return bp
