#!/usr/bin/env python3
"""Replays a run's TTFT predictions under other latency models, from tokenmeter's trace.

Run tokenmeter with RUST_LOG="info,tokenmeter::prediction=trace" (scripts/bench-slo.sh passes
RUST_LOG through) and give this script the log: each request placed by `balance = "slo"` left one
line, "prediction against outcome", with the load the placement saw, the prompt and cached
tokens estimated and reported, the TTFT predicted and measured, and its age at the finish. From
the ages it rebuilds every backend's queue at each dispatch, then replays each model below over
the requests in the order they finished (as the proxy learns them), predicting each request
before learning it, and prints the median absolute error of predicted / measured TTFT.

The placements stay those of the run: this says how well each model would have predicted them,
not where it would have placed them.

    scripts/replay-predictions.py /tmp/tmp.XXXX/serve-slo-32.log
"""
import datetime
import re
import statistics
import sys

FIELD = re.compile(r'(\w+)=("[^"]*"|[^ ]+)')


def read(path):
    rows = []
    for line in open(path, encoding="utf-8"):
        if "prediction against outcome" not in line:
            continue
        fields = dict(FIELD.findall(line.split("outcome", 1)[1]))
        row = {k: v.strip('"') if k == "backend" else float(v) for k, v in fields.items()}
        finished = datetime.datetime.fromisoformat(line[:26]).timestamp()
        row["dispatched"] = finished - row["age_ms"] / 1000
        row["first_token"] = row["dispatched"] + row["ttft_ms"] / 1000
        row["finished"] = finished
        rows.append(row)
    return rows


def rebuild_queues(rows):
    """Each request's backend's queue at its dispatch: the estimated uncached tokens of the
    requests dispatched before it and not yet at their first token, and how long since the queue
    last moved (a first token, or a request joining it empty)."""
    by_backend = {}
    for row in sorted(rows, key=lambda r: r["dispatched"]):
        by_backend.setdefault(row["backend"], []).append(row)
    for requests in by_backend.values():
        for i, row in enumerate(requests):
            t = row["dispatched"]
            queued = [o for o in requests[:i] if o["first_token"] > t]
            row["queue"] = sum(
                max(o["estimated_prompt"] - o["estimated_cached"], 0) for o in queued
            )
            done = [o["first_token"] for o in requests[:i] if o["first_token"] <= t]
            head = min((o["dispatched"] for o in queued), default=t)
            row["busy"] = t - max(max(done, default=0.0), head) if queued else 0.0


class Rls:
    """Recursive least squares with forgetting and a capped covariance trace, as
    src/route/backend/predict/rls.rs."""

    def __init__(self, prior, memory):
        n = len(prior)
        self.theta = list(prior)
        self.p = [[1.0 if i == j else 0.0 for j in range(n)] for i in range(n)]
        self.lam = 1.0 - 1.0 / memory
        self.max_trace = float(n)
        self.mean = [0.0] * n
        self.weight = 0.0

    def value(self, x):
        """The prediction, a negative slope's feature read at its mean, never below zero."""
        v = self.theta[0]
        for k in range(1, len(x)):
            v += self.theta[k] * (x[k] if self.theta[k] >= 0 else self.mean[k])
        return max(v, 0.0)

    def update(self, x, y, w):
        n = len(x)
        s = w ** 0.5
        xs = [v * s for v in x]
        ys = y * s
        px = [sum(self.p[i][j] * xs[j] for j in range(n)) for i in range(n)]
        den = self.lam + sum(xs[i] * px[i] for i in range(n))
        gain = [v / den for v in px]
        err = ys - sum(self.theta[i] * xs[i] for i in range(n))
        self.theta = [self.theta[i] + gain[i] * err for i in range(n)]
        self.p = [[(self.p[i][j] - gain[i] * px[j]) / self.lam for j in range(n)] for i in range(n)]
        trace = sum(self.p[i][i] for i in range(n))
        if trace > self.max_trace:
            self.p = [[v * self.max_trace / trace for v in row] for row in self.p]
        self.weight = self.lam * self.weight + 1.0
        self.mean = [m + (v - m) / self.weight for m, v in zip(self.mean, x)]


def uncached(row, estimated):
    prompt = row["estimated_prompt"] if estimated else row["prompt"]
    cached = row["estimated_cached"] if estimated else row["cached"]
    return max(prompt - cached, 0) / 1000


def joint(row, model, estimated):
    """The model before 2026-12-04: a0 + a1 (queue + own) + a2 streams."""
    return [1.0, row["queue"] / 1000 + uncached(row, estimated), row["streams"]]


def split(row, model, estimated):
    """Queue and own prompt with slopes of their own."""
    return [1.0, row["queue"] / 1000, uncached(row, estimated), row["streams"]]


def drained(row, model, estimated):
    """As `split`, the queue less what the backend prefilled of it since it last moved, at the
    rate the model learned (1 / a2): what tokenmeter now does (Backend::load)."""
    rate = model.theta[2]
    done = row["busy"] / rate if rate > 0 else 0.0
    return [1.0, max(row["queue"] / 1000 - done, 0.0), uncached(row, estimated), row["streams"]]


VARIANTS = [
    ("joint, unweighted", joint, [0.020, 0.050, 0.001], False),
    ("joint, weighted 1/TTFT", joint, [0.020, 0.050, 0.001], True),
    ("split, weighted 1/TTFT", split, [0.020, 0.050, 0.050, 0.001], True),
    ("split, weighted, queue drained", drained, [0.020, 0.050, 0.050, 0.001], True),
]


def replay(rows, features, prior, weighted, memory=200):
    models = {}
    ratios = []
    for row in sorted(rows, key=lambda r: r["finished"]):
        model = models.setdefault(row["backend"], Rls(prior, memory))
        y = row["ttft_ms"] / 1000
        if y <= 0:
            continue
        ratios.append(model.value(features(row, model, True)) / y)
        w = 1.0 / max(y, 0.010) if weighted else 1.0
        model.update(features(row, model, False), y, w)
    return ratios


def summary(ratios):
    ratios = sorted(ratios)
    n = len(ratios)
    error = statistics.median(abs(r - 1) for r in ratios)
    return f"{error * 100:5.1f} % | {ratios[n // 2]:.2f} | {ratios[n // 10]:.2f} / {ratios[9 * n // 10]:.2f}"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: replay-predictions.py SERVE_LOG")
    rows = read(sys.argv[1])
    if not rows:
        sys.exit(f"{sys.argv[1]}: no 'prediction against outcome' lines (RUST_LOG?)")
    rebuild_queues(rows)
    print(f"{len(rows)} requests")
    print("| model | median absolute error | median predicted / measured | p10 / p90 |")
    print("|---|---:|---:|---:|")
    logged = [r["predicted_ttft_ms"] / r["ttft_ms"] for r in rows if r["ttft_ms"] > 0]
    print(f"| as run | {summary(logged)} |")
    for name, features, prior, weighted in VARIANTS:
        print(f"| {name} | {summary(replay(rows, features, prior, weighted))} |")


if __name__ == "__main__":
    main()
