"""``python -m cselab.cli COMMAND ...`` = ``cselab COMMAND ...``."""

import sys

from cselab.cli import main

sys.exit(main())
