"""``python -m capr.reproduce``: re-run every published condition and compare (capr.eval.reproduce)."""

import sys

from capr.eval.reproduce import main

if __name__ == "__main__":
    sys.exit(main())
