"""`python -m steps.train`: the train step's command line (the step is steps/train/__init__.py)."""

import sys

from steps.train import main

if __name__ == "__main__":
    sys.exit(main())
