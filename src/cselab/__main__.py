"""``python -m cselab COMMAND ...`` = ``cselab COMMAND ...`` (:mod:`cselab.cli`): the ``python -m`` spelling of
every command (``python -m cselab data``, ``python -m cselab export ...``), for an environment without the
console script on its PATH."""

import sys

from cselab.cli import main

sys.exit(main())
