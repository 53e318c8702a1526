"""A target whose import reports progress on stderr, as data loading often does."""

import sys

print("loading the dataset from disk", file=sys.stderr)


def step():
    pass
