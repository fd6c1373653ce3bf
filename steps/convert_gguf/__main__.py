"""`python -m steps.convert_gguf`: the convert-gguf step's command line (the step is steps/convert_gguf/__init__.py)."""

import sys

from steps.convert_gguf import main

if __name__ == "__main__":
    sys.exit(main())
