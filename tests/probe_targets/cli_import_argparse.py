"""A target that parses the command line at import, so it sees `gradlint probe`'s arguments."""

import argparse

parser = argparse.ArgumentParser()
parser.add_argument("--config", required=True)
args = parser.parse_args()


def step():
    pass
