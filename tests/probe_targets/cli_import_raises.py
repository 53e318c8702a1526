"""A target whose set-up fails at import."""

DATA = []

if not DATA:
    raise ValueError("the dataset is empty")


def step():
    pass
