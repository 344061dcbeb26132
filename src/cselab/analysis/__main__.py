"""``python -m cselab.analysis ...`` = ``cselab analysis ...`` (:mod:`cselab.cli.analysis`)."""

import sys

from cselab.cli.analysis import main

if __name__ == "__main__":
    sys.exit(main())
