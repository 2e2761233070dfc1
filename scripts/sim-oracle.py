#!/usr/bin/env python3
"""What the least an autoscaler could hold on scripts/bench-autoscale.sh's profile costs.

The loop's cost goal (#41: at most 75 % of a peak-sized fleet's replica-seconds) depends on the
profile as much as on the scaler. This asks what a scaler that knew everything would hold: the
load at every second in advance, and what a replica sustains. At each second it needs
ceil(headroom x offered / per_replica) replicas; it holds each from a cold start before it is
needed (a replica is counted from the decision, as the loop counts it) and until scale_down_after
after the need for it ended (the loop's stabilisation). The offered load is the profile's rate
(6 requests/s for 60 s, up to 18 over 120 s, held 120 s, down over 120 s, then 6) plus the
sessions' turns beside it (SESSIONS, 1.3 a second as the gateway's signal read at the lead), over
the loop's 501 s; the fleet of three held 1 503 replica-seconds there. Standard library only.

    python3 scripts/sim-oracle.py
"""
import math

BASE, LEAD, RAMP, HOLD, SECONDS = 6.0, 60, 120, 120, 501
SESSIONS, COLD, DOWN_AFTER, PEAK_FLEET = 1.3, 20, 60, 1503


def offered(t):
    peak = 3 * BASE
    if t < LEAD:
        rate = BASE
    elif t < LEAD + RAMP:
        rate = BASE + (peak - BASE) * (t - LEAD) / RAMP
    elif t < LEAD + RAMP + HOLD:
        rate = peak
    elif t < LEAD + 2 * RAMP + HOLD:
        rate = peak - (peak - BASE) * (t - LEAD - RAMP - HOLD) / RAMP
    else:
        rate = BASE
    return rate + SESSIONS


def held(headroom, per_replica):
    need = [max(1, math.ceil(headroom * offered(t) / per_replica)) for t in range(SECONDS)]
    total = 0
    for t in range(SECONDS):
        ahead = need[t:t + COLD + 1]
        behind = need[max(0, t - DOWN_AFTER):t + 1]
        total += max(ahead + behind)
    return total


print("| headroom | a replica sustains | replica-seconds | of the fleet of three's |")
print("|---:|---:|---:|---:|")
for headroom in (1.25, 1.1):
    for per_replica in (10.0, 10.5):
        total = held(headroom, per_replica)
        print(f"| {headroom} | {per_replica} /s | {total} | {100 * total / PEAK_FLEET:.1f} % |")
