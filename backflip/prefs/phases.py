"""The long phases of a preference run, by name: what the seed's status says while it is in one
(`Pipeline.progress`), what `backflip show` and the labeling page print. The names are read by
the UI too, which must not import the pipeline (and torch) to know them."""

GATHERING = "gathering clips from a random policy"
EXPLORING = "exploring before the first labels"
INITIAL_LABELS = "initial labels"
PRETRAINING = "pretraining the reward model"

# the phases in which the policy steps (and trains, on the exploration bonus)
POLICY_STEPS = frozenset({EXPLORING})
