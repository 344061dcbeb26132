"""``python -m cselab.report ...`` = ``cselab report ...`` (:mod:`cselab.cli.report`)."""

import sys

from cselab.cli.report import main

if __name__ == "__main__":
    sys.exit(main())
