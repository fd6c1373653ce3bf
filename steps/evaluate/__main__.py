"""`python -m steps.evaluate`: the evaluate step's command line (the step is steps/evaluate/__init__.py)."""

import sys

from steps.evaluate import main

if __name__ == "__main__":
    sys.exit(main())
