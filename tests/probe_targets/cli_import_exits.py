"""A target whose import ends the process: a script without an `if __name__ == "__main__"` guard."""

import sys

sys.exit(4)


def step():
    pass
