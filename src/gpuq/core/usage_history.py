"""Fair share from usage history: decayed resource-seconds per ClusterQueue and cohort.

Kueue's fair sharing compares what each queue borrows *now*. Slurm's Fair Tree
and KAI's time-based fair share compare what each has *used*, decayed with a
half-life, so a team that held the cluster all night yields in the morning.
A root cohort with ``gpuq.dev/usage-half-life`` turns that on for its tree
(docs/usage-fair-share.md): the fair-sharing tournament then ranks children by

    share = max over resources r of  (decayed usage of r ÷ τ) ÷ nominal quota of r ÷ weight

where τ = half-life ÷ ln 2 is the decayed length of the whole past, so a share of
1 means "used its nominal quota all the time, lately". Usage is integrated
exactly between changes (it is constant between a reservation and a release),
so no sampling timer is needed and the simulator and the live loop agree.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

from gpuq.core.admission_fairshare import alpha
from gpuq.core.quota import FlavorResource


def decay(elapsed_s: float, half_life_s: float) -> float:
    """The factor a value keeps after ``elapsed_s`` (1 for no time, 0.5 after one half-life): what
    Admission Fair Sharing's alpha leaves of the old usage."""
    return 1.0 - alpha(max(elapsed_s, 0.0), half_life_s)


@dataclass(slots=True)
class QueueHistory:
    """One ClusterQueue's decayed usage per resource, exact at ``at``."""

    half_life_s: float
    at: float = 0.0
    used: dict[str, float] = field(default_factory=dict)  # decayed resource-seconds at ``at``
    rate: dict[str, float] = field(default_factory=dict)  # usage held since ``at``

    def value(self, now: float) -> dict[str, float]:
        """Decayed resource-seconds at ``now``: what was used before ``at`` decayed, plus the
        integral of the constant usage held since."""
        keep = decay(now - self.at, self.half_life_s)
        tau = self.half_life_s / math.log(2)
        names = self.used.keys() | self.rate.keys()
        return {
            r: self.used.get(r, 0.0) * keep + self.rate.get(r, 0.0) * tau * (1.0 - keep) for r in names
        }

    def change(self, usage: Mapping[FlavorResource, int], sign: int, now: float) -> None:
        """``usage`` starts (``sign`` 1) or stops (-1) being held at ``now``."""
        now = max(now, self.at)  # a change recorded late never rewinds the integral
        self.used = self.value(now)
        self.at = now
        for (_, resource), amount in usage.items():
            held = self.rate.get(resource, 0.0) + sign * amount
            if held > 1e-9:
                self.rate[resource] = held
            else:
                self.rate.pop(resource, None)


def share(
    used: Mapping[str, float], nominal: Mapping[str, int], half_life_s: float, weight: Fraction
) -> float:
    """A node's usage-history share (lower is served first); +inf for usage without quota or weight."""
    tau = half_life_s / math.log(2)
    best = 0.0
    for resource, amount in used.items():
        if amount <= 1e-9:
            continue
        quota = nominal.get(resource, 0)
        if quota <= 0:
            return math.inf
        best = max(best, amount / tau / quota)
    if best == 0.0:
        return 0.0
    return math.inf if weight == 0 else best / float(weight)


def summed(values: list[dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for value in values:
        for resource, amount in value.items():
            out[resource] = out.get(resource, 0.0) + amount
    return out
