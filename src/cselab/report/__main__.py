"""The old ``python -m cselab.report`` spelling: it names the new one (the command lives in :mod:`cselab.cli`,
which no library package imports back)."""

raise SystemExit("python -m cselab.report moved: type python -m cselab report ... (or cselab report ...)")
