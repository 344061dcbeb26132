"""Moved: the NLI -> triplet conversion is :mod:`cselab.cli.nli_triplets`, its command ``cselab nli-convert``.  This
module is kept so that the old ``python -m cselab.data.nli_convert`` spelling names the new one."""

if __name__ == "__main__":  # the old spelling: no import of cselab.cli here (that was a circle)
    raise SystemExit("python -m cselab.data.nli_convert moved: type python -m cselab nli-convert ... "
                     "(or cselab nli-convert ...)")
