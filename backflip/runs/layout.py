"""The archive's layout: the name of every file and folder of a run, and which seeds a seed's
env copies get. One owner: whatever writes or reads the archive names its paths through here.

    <home>/
      .gitignore                 GITIGNORE: `*`, so an archive inside a git repository stays out
                                 of it (`archive.keep_out_of_git`)
      index.sqlite               INDEX: a cache of every run.json (runs/index.py)
      .index.lock                INDEX_LOCK: held while the index is rebuilt (one process at a
                                 time replaces it; the others then find it there)
      reports/<id>/              REPORTS: `backflip report`'s default output
      <run id>/
        run.json                 RUN_JSON: id, argv, cwd, message, resolved config, budget
                                 (steps requested and planned), import_paths (where its env
                                 module was found), status, results, provenance
        run.json.bak             BACKUP: the last good copy of run.json (restored from if it breaks)
        .lock                    LOCK: held while run.json is read, changed and written
        code.patch               uncommitted changes of the repo the run was launched from
        backflip.patch           ... of backflip itself, when it is a separate checkout
        packages.txt             every installed package, pinned
        findings.json            FINDINGS: the doctor's findings (when it has run)
        seeds/<seed>/            seed_dir(run_dir, seed)
          status.json            STATUS: status, steps, steps/s, final evaluation, error
          traceback.txt          TRACEBACK: a failed seed's traceback
          stdout.log stderr.log  STDOUT, STDERR: everything the seed's process printed
          metrics.csv            METRICS: long table: step, wall, name, value (docs/metrics.md)
          episodes.csv           EPISODES: every finished training episode: step, return, length
          true_episodes.csv      TRUE_EPISODES: a preference run's training episodes on the task's
                                 reward, the same columns (its episodes.csv holds r̂)
          tb/                    TENSORBOARD: TensorBoard event files
          checkpoints/           CHECKPOINTS: checkpoint_name(step) (periodic), FINAL_CHECKPOINT
          videos/                VIDEOS: video_name(step) (`video_every`), watch_*.mp4
          prefs.sqlite           PREFS_DB: a preference run's segments, queries and labels
          reward_model.pt        REWARD_MODEL: a preference run's reward model (ensemble, input
                                 statistics, output normalization) and its settings

A seed `s` trains on env copies seeded `env_seed(s) + i` (copy i) and is evaluated, and filmed,
on copies seeded `eval_seed(s) + i`: evaluation never replays a training episode's start, and
`backflip watch` films the episode the last evaluation saw.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

RUN_ID = re.compile(r"^\d{8}-\d{6}-[0-9a-f]{4}$")  # a run directory's name: `new_run_id`
INDEX = "index.sqlite"
INDEX_LOCK = ".index.lock"
GITIGNORE = ".gitignore"
REPORTS = "reports"
RUN_JSON = "run.json"
BACKUP = "run.json.bak"
LOCK = ".lock"
FINDINGS = "findings.json"
CODE_PATCH = "code.patch"
BACKFLIP_PATCH = "backflip.patch"
PACKAGES = "packages.txt"

SEEDS = "seeds"
STATUS = "status.json"
TRACEBACK = "traceback.txt"
STDOUT = "stdout.log"
STDERR = "stderr.log"
METRICS = "metrics.csv"
EPISODES = "episodes.csv"
TRUE_EPISODES = "true_episodes.csv"
TENSORBOARD = "tb"
PREFS_DB = "prefs.sqlite"
REWARD_MODEL = "reward_model.pt"
CHECKPOINTS = "checkpoints"
FINAL_CHECKPOINT = "final.pt"
VIDEOS = "videos"

SEED_STRIDE = 1000  # env copies of one seed: env_seed(s) .. env_seed(s) + 999
EVAL_SEED_OFFSET = 500  # evaluation copies never share seeds with training copies


def new_run_id() -> str:
    """Sortable and unique across concurrent launches: 20261122-074502-3f9a."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(2).hex()


def seed_dir(run_dir: Path, seed: int) -> Path:
    return Path(run_dir) / SEEDS / str(seed)


def checkpoint_name(step: int) -> str:
    """A periodic checkpoint's file name; names sort in step order."""
    return f"step_{step:09d}.pt"


def checkpoint_step(name: str) -> int | None:
    """The step in a periodic checkpoint's name (`checkpoint_name`), else None (`final.pt`, a
    file of another kind)."""
    stem, dot, ext = name.partition(".")
    prefix, _, digits = stem.partition("_")
    if prefix != "step" or ext != "pt" or not dot or not digits.isdigit():
        return None
    return int(digits)


def video_name(step: int) -> str:
    """A video recorded during training at `step`."""
    return f"step_{step:09d}.mp4"


def env_seed(seed: int) -> int:
    """The seed of a seed's first training env copy; copy i gets env_seed(seed) + i."""
    return seed * SEED_STRIDE


def eval_seed(seed: int) -> int:
    """The seed of a seed's first evaluation (and video) env copy."""
    return env_seed(seed) + EVAL_SEED_OFFSET
