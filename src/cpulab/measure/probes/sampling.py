"""Running a probe's artifact through the executor and reading one figure per run."""
from __future__ import annotations

import statistics

from cpulab.measure.execute.executor import Executor, HarnessJob, default_executor
from cpulab.model import Status
from cpulab.measure.probes.asm import ProbeError


def measure(art_path: str, params: dict[str, str], samples: int, timer: str,
            min_sample_time: float | None = None, executor: Executor | None = None) -> dict:
    """One process of a probe artifact -> the harness's JSON; ProbeError if it did not measure."""
    job = HarnessJob(art_path, params, samples, timer=timer,
                     **({"min_sample_time": min_sample_time} if min_sample_time is not None else {}))
    out = (executor or default_executor()).execute(job)
    if out.status != Status.OK:
        raise ProbeError(f"{out.status}: {out.error}")
    return out.data


def per_unit(d: dict, key: str, estimator: str = "min") -> float | None:
    """One run's figure per unit of work: its fastest sample ("min", the default:
    interference -- a busy hyperthread sibling, preemption -- only ever adds time, and on
    a shared machine it comes and goes within a run) or the median sample."""
    vals = [v for v in d.get(key, []) if v is not None]
    if not vals:
        return None
    return (min(vals) if estimator == "min" else statistics.median(vals)) / d["work"]


def spread(values: list[float | None]) -> dict:
    vals = [v for v in values if v is not None]
    if not vals:
        return {"median": None, "min": None, "max": None, "runs": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "runs": vals}
