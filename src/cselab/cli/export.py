"""``cselab export`` / ``python -m cselab export``: a checkpoint as a sentence-transformers folder
(:func:`cselab.export.export`), optionally pushed to the Hugging Face Hub (:mod:`cselab.export.hub`)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from cselab import export as exporting
from cselab.cli import fail


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m cselab export TARGET OUT_DIR [--overwrite] [--no-verify] [--results RESULTS_JSON]
    [--merge-lora] [--push-to-hub ID [--private]]``.  ``TARGET``: a run directory (its best checkpoint), a
    ``.ckpt`` or a backbone (``method=baseline`` with avg pooling), resolved by :func:`cselab.io.targets.resolve_target`
    as every command resolves one; an exported folder is refused (it is one already).

    ``--push-to-hub`` (off by default) checks the token and the network BEFORE loading the checkpoint, then
    uploads the folder (with its model card) with ``huggingface_hub``.  Exit status: 0; 1 when the export's
    check fails (max abs difference > ``TOLERANCE`` 1e-5, each probe sentence encoded alone both
    ways: nothing is pushed) or the upload fails; 2 on a refused export
    or push (no token, offline, bad id).
    """
    import cselab
    from cselab.export.hub import HubError, check_push_access, push_folder
    from cselab.io.targets import TARGETS, TargetError, resolve_target

    parser = argparse.ArgumentParser(prog="python -m cselab export", description=exporting.__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", metavar="TARGET", help=f"{TARGETS}; not an exported folder")
    parser.add_argument("out_dir", help="the sentence-transformers folder to write")
    parser.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT_DIR")
    parser.add_argument("--no-verify", action="store_true", help="skip the comparison on probe sentences")
    parser.add_argument("--merge-lora", action="store_true",
                        help="tuning=lora: fold the adapters into the backbone's weights (a plain model, no PEFT "
                             "at load time) instead of shipping them as adapters")
    parser.add_argument("--results", default=None, metavar="RESULTS_JSON",
                        help="the run's results.json for the model card (default: the checkpoint's run's)")
    parser.add_argument("--push-to-hub", default=None, metavar="ID",
                        help="upload OUT_DIR to the Hugging Face model repository ID (owner/name); needs a token "
                             "(hf auth login / HF_TOKEN) and the network")
    parser.add_argument("--private", action="store_true", help="with --push-to-hub: create the repository private")
    args = parser.parse_args(argv)
    try:
        target = resolve_target(args.checkpoint)
    except TargetError as err:
        return fail(f"cselab.export: {err}", 2)
    if target.kind == "exported":
        return fail(f"cselab.export: {args.checkpoint} is already an exported folder: load it with "
                    "SentenceTransformer(folder) or cselab.load(folder)", 2)
    if target.kind == "run_dir":  # a run directory: its best checkpoint, as every command takes it
        print(f"cselab.export: exporting the run's best checkpoint {target.path}", file=sys.stderr)
    if target.kind == "backbone":  # the raw backbone as method=baseline (avg pooling), as transfer / mteb read it
        print(f"cselab.export: exporting the backbone {target.path} with pooler=avg (method=baseline)",
              file=sys.stderr)
    token = None
    if args.push_to_hub:
        try:
            token = check_push_access(args.push_to_hub)
        except HubError as err:
            return fail(f"cselab.export: {err}", 2)
    try:
        source = cselab.load(target.path, family=target.family) if target.kind == "backbone" else target.path
        result = exporting.export(source, args.out_dir, overwrite=args.overwrite,
                                  verify=not args.no_verify, results=args.results, repo_id=args.push_to_hub,
                                  merge_lora=args.merge_lora)
    except (exporting.ExportError, FileNotFoundError, OSError) as err:
        return fail(f"cselab.export: {err}", 2)
    print(json.dumps(result, indent=2, default=str))
    if not result["trust_remote_code"]:
        kind = "plain sentence-transformers modules (no remote code)"
    elif result["st_module_reason"] is None:
        kind = "plain modules + st_module.CselabWhitening (trust_remote_code=True) for the BERT-whitening transform"
    else:
        kind = f"st_module (trust_remote_code=True) for {result['st_module_reason']}"
    check = result["check"]
    print(f"cselab.export: {args.out_dir}: {kind}; max |diff| vs cselab.load on the probe sentences: "
          + ("not checked (--no-verify)" if check is None else
             f"{check['max_abs_diff']:.3g} ({check['sentences']} sentences, each encoded alone both ways)"),
          file=sys.stderr)
    if check is not None and not check["passed"]:
        return fail(f"cselab.export: WARNING max abs difference {check['max_abs_diff']:.3g} > {check['tolerance']:g}"
                    + ("; not pushed" if args.push_to_hub else ""), 1)
    if args.push_to_hub:
        try:
            url = push_folder(args.out_dir, args.push_to_hub, token, private=args.private)
        except HubError as err:
            return fail(f"cselab.export: {err}", 1)
        print(f"cselab.export: pushed {args.out_dir} to {args.push_to_hub}: {url}", file=sys.stderr)
    return 0
