"""python -m dpgen.privacy plan <mechanism> ...: steps that fit a privacy budget."""

from __future__ import annotations

import argparse
import json

from .plan import plan_confident_gnmax, plan_dpsgd, plan_laplace_pate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dpgen.privacy")
    commands = parser.add_subparsers(dest="command", required=True)
    plan = commands.add_parser("plan", help="how many training steps fit (epsilon, delta)")
    mechanisms = plan.add_subparsers(dest="mechanism", required=True)

    def budget(p, conversions=("classical", "improved")):
        p.add_argument("--epsilon", type=float, required=True)
        p.add_argument("--delta", type=float, required=True)
        p.add_argument("--conversion", choices=conversions, default="classical")

    gnmax = mechanisms.add_parser("confident_gnmax", help="G-PATE: Confident-GNMax per projected dimension")
    gnmax.add_argument("--teachers", type=int, required=True)
    gnmax.add_argument("--sigma1", type=float, required=True, help="threshold noise std")
    gnmax.add_argument("--sigma2", type=float, required=True, help="GNMax noise std")
    gnmax.add_argument("--threshold", type=float, required=True, help="fraction of teachers, e.g. 0.5")
    gnmax.add_argument("--queries-per-step", type=int, required=True)
    gnmax.add_argument("--bins", type=int, default=10)
    gnmax.add_argument("--top-share", type=float, default=1.0,
                       help="best case: the top bin's share of the votes (default 1: unanimous)")
    budget(gnmax)

    laplace = mechanisms.add_parser("laplace_pate", help="PATE-GAN: Laplace noisy vote (lam = inverse scale)")
    laplace.add_argument("--teachers", type=int, required=True)
    laplace.add_argument("--lam", type=float, required=True)
    laplace.add_argument("--queries-per-step", type=int, required=True)
    laplace.add_argument("--classes", type=int, default=2)
    budget(laplace)

    dpsgd = mechanisms.add_parser("dpsgd", help="DP-SGD (Poisson-subsampled Gaussian)")
    dpsgd.add_argument("--sample-rate", type=float, required=True)
    dpsgd.add_argument("--noise-multiplier", type=float, required=True)
    budget(dpsgd, ("classical", "improved", "pld"))
    return parser


def main(argv=None) -> dict:
    args = _parser().parse_args(argv)
    common = {"epsilon": args.epsilon, "delta": args.delta, "conversion": args.conversion}
    if args.mechanism == "confident_gnmax":
        result = plan_confident_gnmax(args.teachers, args.sigma1, args.sigma2, args.threshold,
                                      args.queries_per_step, bins=args.bins, top_share=args.top_share, **common)
    elif args.mechanism == "laplace_pate":
        result = plan_laplace_pate(args.teachers, args.lam, args.queries_per_step, classes=args.classes, **common)
    else:
        result = plan_dpsgd(args.sample_rate, args.noise_multiplier, **common)
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
