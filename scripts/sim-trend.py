#!/usr/bin/env python3
"""How the headroom's trend (src/route/placement/headroom/trend.rs) reads a Poisson load.

A load of 7 requests a second, sampled each second, flat for 1 000 s and then rising 0.1 a second
(a ramp to 3x over two minutes), averaged as the headroom averages it (15 s), its trend fitted
over a 60 s span and extrapolated 35 s ahead (window + a cold start of 20 s), the forecast at
most twice the average. For each way of reading the slope: the highest forecast over the flat
part as a multiple of the load, the share of its seconds above 1.1x, when the ramp is first seen
(forecast 5 % above the average), and a minute into the ramp the forecast against the rate
35 s later. Ten seeds each; Python's standard library only.

    python3 scripts/sim-trend.py
"""
import math
import random
import statistics

RATE, FLAT, SLOPE, SPAN, WINDOW, AHEAD, SEEDS = 7.0, 1000, 0.1, 60, 15.0, 35.0, 10


def poisson(rng, lam):
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p < limit:
            return k
        k += 1


def fit(samples):
    n = len(samples)
    tm = sum(t for t, _ in samples) / n
    rm = sum(r for _, r in samples) / n
    sxx = sum((t - tm) ** 2 for t, _ in samples)
    slope = sum((t - tm) * (r - rm) for t, r in samples) / sxx
    residuals = sum((r - rm - slope * (t - tm)) ** 2 for t, r in samples)
    return slope, math.sqrt(residuals / (n - 2) / sxx)


def run(rule, fewest, seed):
    rng = random.Random(seed)
    samples, out, average = [], [], RATE
    for t in range(FLAT + 200):
        lam = RATE + (SLOPE * (t - FLAT) if t >= FLAT else 0.0)
        sample = poisson(rng, lam)
        average += (sample - average) * (1 - math.exp(-1 / WINDOW))
        samples = [s for s in samples if s[0] > t - SPAN] + [(t, sample)]
        rise = rule(*fit(samples)) if len(samples) >= fewest else 0.0
        out.append((t, average, min(average + rise * AHEAD, 2 * average)))
    return out


RULES = {
    "slope when above 2 standard errors, from 10 samples": (lambda b, e: b if b > 2 * e else 0.0, 10),
    "slope when above 2 standard errors, a whole span": (lambda b, e: b if b > 2 * e else 0.0, SPAN),
    "slope when above 3 standard errors, a whole span": (lambda b, e: b if b > 3 * e else 0.0, SPAN),
    "slope less 1 standard error, a whole span": (lambda b, e: max(0.0, b - e), SPAN),
    "slope less 2 standard errors, a whole span (built)": (lambda b, e: max(0.0, b - 2 * e), SPAN),
}

print("| rule | flat: highest forecast / load | flat: seconds above 1.1x | ramp seen after (median, worst) | a minute in: forecast / rate 35 s later |")
print("|---|---:|---:|---:|---:|")
for name, (rule, fewest) in RULES.items():
    highest, above, seen, reach = [], [], [], []
    for seed in range(SEEDS):
        out = run(rule, fewest, seed)
        flat = [f / a for t, a, f in out if fewest <= t < FLAT]
        highest.append(max(flat))
        above.append(sum(1 for x in flat if x > 1.1) / len(flat))
        first = [t - FLAT for t, a, f in out if t >= FLAT and f > 1.05 * a]
        seen.append(first[0] if first else float("inf"))
        forecast = next(f for t, a, f in out if t == FLAT + 60)
        reach.append(forecast / (RATE + SLOPE * (60 + AHEAD)))
    print(f"| {name} | {max(highest):.2f} | {100 * statistics.mean(above):.1f} % | "
          f"{statistics.median(seen):.0f} s, {max(seen):.0f} s | {statistics.mean(reach):.2f} |")
