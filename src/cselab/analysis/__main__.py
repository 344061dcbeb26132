"""The old ``python -m cselab.analysis`` spelling: it names the new one (the command lives in :mod:`cselab.cli`,
which no library package imports back)."""

raise SystemExit("python -m cselab.analysis moved: type python -m cselab analysis ... (or cselab analysis ...)")
