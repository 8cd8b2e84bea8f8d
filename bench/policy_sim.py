"""The adaptive policy against slow spells, with the clock controlled: the table in docs/benchmarks.md, "Spells of
slow steps".

Each workload runs the policy in the simulated engine of ``tests/unit/test_policy.py`` (fake clock, known costs and
acceptance) and divides its tokens/s by the best fixed ``k``'s on the same step costs. Four families, batch 16 on
this CPU's EAGLE-1 costs (``_cpu_batch_16``) unless said:

* spells: 6-12 steps at 1.4-1.7x every 30-80 steps (``test_spells_of_slow_steps_do_not_switch_k``);
* replay: the step-time ratios a pinned ``k = 0`` engine measured at batch 12-16 (``bench/data/step_noise_c16.json``,
  recorded with ``bench.policy --step-log``), replayed from 6 offsets;
* random: spells of 4-12 steps at +30-80 % (added or multiplied) starting with probability 1/80-1/20 per step
  (``test_random_spells_of_slow_steps_do_not_mislead_it``);
* lone: a lone request, no spells (``test_a_lone_request_within_2_percent_of_the_best_fixed_k``).

    python -m bench.policy_sim                                  # the three columns of the docs (about 2 minutes)
    python -m bench.policy_sim --settings compare_samples=8 paired=0   # one column
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from pathlib import Path

from tests.unit import test_policy as T
from vllm_spec_plugins.policy import AdaptivePolicy, PolicySettings

NOISE = Path(__file__).resolve().parent / "data" / "step_noise_c16.json"
COLUMNS = [{"compare_samples": 8, "paired": False}, {"compare_samples": 16, "paired": False}, {}]


def noise() -> list[float]:
    return json.loads(NOISE.read_text())["ratios"]


def replay(seed: int, ratios: list[float]):
    """``_cpu_batch_16`` times the recorded ratios, from an offset chosen by ``seed``."""
    i = [random.Random(seed).randrange(len(ratios))]

    def cost(b, kv, kd):
        x = ratios[i[0] % len(ratios)]
        i[0] += 1
        return T._cpu_batch_16(b, kv, kd) * x

    return cost


def _ratio(settings: PolicySettings, k_max: int, make_cost, **kw) -> float:
    best = max(T.fixed_k(k_max, k, cost=make_cost(), **kw) for k in range(k_max + 1))
    clock = T.Clock()
    return T.simulate(AdaptivePolicy(k_max, settings, clock=clock), clock, cost=make_cost(), **kw)["rate"] / best


def families(settings: PolicySettings, steps: int = 2000) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"spells": [], "replay": [], "random": [], "lone": []}
    for every, length, factor in ((40, 8, 1.6), (60, 10, 1.5), (50, 12, 1.4), (80, 8, 1.7), (30, 6, 1.5)):
        for a in (0.45, 0.6):
            out["spells"].append(_ratio(settings, 2, lambda e=every, n=length, f=factor: T._slow_spells(T._cpu_batch_16, e, n, f),
                                        steps=steps, b=16, alpha=lambda s, a=a: a))
    ratios = noise()
    for a in (0.3, 0.45, 0.6, 0.75):
        for seed in range(6):
            out["replay"].append(_ratio(settings, 2, lambda seed=seed: replay(seed, ratios), steps=steps, b=16,
                                        alpha=lambda s, a=a: a, seed=seed))
    for mult in (False, True):
        for p in (1 / 80, 1 / 40, 1 / 20):
            for a in (0.3, 0.45, 0.6):
                for seed in range(3):
                    def spells(seed: int = seed, p: float = p, m: bool = mult):  # type: ignore[no-untyped-def]
                        return T._random_spells(seed, T._cpu_batch_16, p, m)

                    out["random"].append(_ratio(settings, 2, spells, steps=steps, b=16, alpha=lambda s, a=a: a,
                                                seed=seed))
    for cost in (T._eagle3_here, T.cpu_big_batch_b1, T.gpu_like):
        for a in (0.2, 0.3, 0.45, 0.6, 0.8):
            out["lone"].append(statistics.mean(_ratio(settings, 3, lambda c=cost: c, steps=steps, b=1,
                                                      alpha=lambda s, a=a: a, seed=seed) for seed in range(3)))
    return out


def _setting(text: str) -> tuple[str, object]:
    key, _, value = text.partition("=")
    if key not in PolicySettings.__dataclass_fields__ or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NAME=VALUE with NAME a PolicySettings field")
    kind = type(getattr(PolicySettings(), key))
    return key, (value.lower() in ("1", "true", "on")) if kind is bool else kind(value)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.policy_sim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", nargs="+", type=_setting, default=None, metavar="NAME=VALUE",
                    help="one column with these PolicySettings (default: the docs' three columns)")
    args = ap.parse_args(argv)
    columns = [dict(args.settings)] if args.settings else COLUMNS
    for kw in columns:
        res = families(PolicySettings(**kw))
        cells = ", ".join(f"{name} {statistics.mean(v):.3f} mean {min(v):.3f} worst ({len(v)})" for name, v in res.items())
        print(f"{kw or 'defaults'}: {cells}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
