"""``cselab compare RUN_A RUN_B [--n-resamples N] [--seed S] [--format markdown|csv] [--out FILE]``

Paired comparison of two finished runs on the same test pairs (:mod:`cselab.report.compare`: the intervals, the
p-values and their Holm adjustment).  Needs each run's ``test_pairs.npz`` (written by the test phase beside
``results.json``).

Exit status: 0 on success, 1 when a run has no per-pair scores or the runs were not scored on the same pairs,
2 on bad arguments, a missing directory or a folder that is not a run (no ``results.json``).  Comparing a run with
itself is said so on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from cselab.cli import fail, write_output
from cselab.evaluation.stats import DEFAULT_BOOTSTRAP, METHODS
from cselab.report.compare import compare_runs, render_comparison


def build_parser() -> argparse.ArgumentParser:
    """The command-line parser (see the module docstring)."""
    p = argparse.ArgumentParser(prog="cselab compare",
                                description="Paired comparison of two runs on the same STS test pairs (A - B).")
    p.add_argument("run_a", metavar="RUN_A", help="run directory (with test_pairs.npz)")
    p.add_argument("run_b", metavar="RUN_B", help="run directory (with test_pairs.npz)")
    p.add_argument("--n-resamples", type=int, default=DEFAULT_BOOTSTRAP.n_resamples, metavar="N",
                   help="bootstrap resamples and random permutations (default: %(default)s)")
    p.add_argument("--seed", type=int, default=DEFAULT_BOOTSTRAP.seed, help="seed of the resampling (default: %(default)s)")
    p.add_argument("--level", type=float, default=DEFAULT_BOOTSTRAP.level, help="confidence level (default: %(default)s)")
    p.add_argument("--method", choices=METHODS, default=DEFAULT_BOOTSTRAP.method, help="bootstrap interval method")
    p.add_argument("--format", choices=("markdown", "csv"), default="markdown", help="output format")
    p.add_argument("--out", type=Path, default=None, help="write to FILE instead of stdout")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 no per-pair scores / different pairs, 2 bad arguments)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    missing = [d for d in (args.run_a, args.run_b) if not Path(d).exists()]
    if missing:
        parser.error(f"no such file or directory: {', '.join(missing)}")
    not_runs = [d for d in (args.run_a, args.run_b) if not (Path(d) / "results.json").is_file()]
    if not_runs:
        parser.error(f"not a run directory (no results.json): {', '.join(not_runs)}; pass two finished runs' "
                     "directories (outputs/<run> or multirun/<sweep>/<job>)")
    if Path(args.run_a).resolve() == Path(args.run_b).resolve():
        print(f"cselab compare: RUN_A and RUN_B are the same run ({Path(args.run_a).resolve()}): every difference "
              "is 0 by construction", file=sys.stderr)
    if args.n_resamples < 100:
        parser.error(f"--n-resamples {args.n_resamples}: expected >= 100")
    try:
        cmp = compare_runs(args.run_a, args.run_b, n_resamples=args.n_resamples, seed=args.seed,
                           level=args.level, method=args.method)
    except (FileNotFoundError, ValueError) as err:
        return fail(f"error: {err}", 1)
    text = render_comparison(cmp, str(args.run_a), str(args.run_b), args.format)
    write_output(text, args.out)
    return 0
