"""Learning from preferences (Christiano et al. 2017): a policy trains on a reward model fit to
answers to "which of these two clips is better?" (docs/preferences.md).

`pipeline.py` runs one seed (policy, labeling, reward-model training); `segments.py` cuts and
selects clips; `db.py` is the SQLite preference database; `reward_model.py` the model;
`labelers.py` the oracle and B-Pref's simulated teachers; `teacher_fit.py` fits a labeler as a
teacher; `people.py` the people who label; `wrapper.py` the learned reward on the seam
(`SeedRun.vec_wrappers`); `frames.py` clip frames; `presets.py` per-env settings.
"""
