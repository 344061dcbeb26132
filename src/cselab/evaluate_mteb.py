"""``python -m cselab.evaluate_mteb ...`` = ``cselab mteb ...`` (:mod:`cselab.cli.mteb`)."""

if __name__ == "__main__":
    import sys

    from cselab.cli.mteb import main

    sys.exit(main())
