"""`python -m steps.serve`: the serve step's command line (the step is steps/serve/__init__.py)."""

import sys

from steps.serve import main

if __name__ == "__main__":
    sys.exit(main())
