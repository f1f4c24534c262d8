"""Groups in turns: harness processes alive together on one CPU, one sample at a time."""
import errno
import os
import random

import pytest

from cpulab.compile import artifacts
from cpulab.plan import toolchain
from cpulab import workloads
from cpulab.measure.execute.executor import HarnessJob, LocalExecutor
from cpulab.model import Status


@pytest.fixture(scope="module")
def sha256_o2():
    return artifacts.build_artifact(workloads.get("sha256"), toolchain.BUILTIN["O2"]).path


def _job(path, samples, **params):
    return HarnessJob(path, {"size": "1024", **params}, samples=samples, min_sample_time=0.0005, warmup=0.0,
                      turns=True, timeout=20)


@pytest.mark.parametrize("members", [2, 3])
def test_samples_are_taken_in_the_order_given(sha256_o2, members):
    rng = random.Random(members)
    orders = [rng.sample(range(members), members) for _ in range(8)]
    outs = LocalExecutor(seed=1).execute_group([_job(sha256_o2, 8) for _ in range(members)], orders)
    assert [o.status for o in outs] == [Status.OK] * members
    assert all(len(o.data["ns"]) == 8 for o in outs)
    taken = sorted((o.data["t_ns"][j], i) for i, o in enumerate(outs) for j in range(8))
    assert [i for _, i in taken] == [i for order in orders for i in order]
    # each sample ends before the next member's begins: one at a time
    spans = sorted((o.data["t_ns"][j], o.data["t_ns"][j] + o.data["ns"][j]) for o in outs for j in range(8))
    assert all(end <= nxt for (_, end), (nxt, _) in zip(spans, spans[1:]))
    assert len({o.layout_pad for o in outs}) >= 1


def test_fewer_tokens_than_samples_ends_early(sha256_o2):
    out, = LocalExecutor(seed=2).execute_group([_job(sha256_o2, 10)], [[0]] * 4)
    assert out.status == Status.OK and len(out.data["ns"]) == 4


@pytest.fixture(scope="module")
def misbehave():
    from conftest import TEST_KERNELS
    from cpulab.plan.toolchain import Variant
    return artifacts.build_executable(TEST_KERNELS / "misbehave.c", Variant("t", cflags=("-O2",))).path


def test_a_member_that_fails_fails_alone(sha256_o2, misbehave):
    bad = misbehave
    jobs = [_job(sha256_o2, 6), HarnessJob(bad, {"mode": "crash"}, samples=6, turns=True, timeout=10),
            HarnessJob(bad, {"mode": "hang"}, samples=6, turns=True, timeout=1.5), _job(sha256_o2, 6),
            _job(str(sha256_o2) + ".gone", 6)]
    outs = LocalExecutor(seed=3).execute_group(jobs, [[0, 1, 2, 3, 4]] * 6)
    assert outs[0].status == outs[3].status == Status.OK and len(outs[3].data["ns"]) == 6
    assert outs[1].status == Status.CRASH and outs[2].status == Status.TIMEOUT
    assert outs[4].status == Status.ERROR and "cannot execute" in outs[4].error


@pytest.mark.parametrize("pidfd", [True, False])
def test_a_process_that_hangs_is_killed_at_its_timeout(misbehave, monkeypatch, pidfd):
    """Its pidfd polled, or before Linux 5.3 (no pidfd) a timer."""
    if not pidfd:
        def no_pidfd(pid):
            raise OSError(errno.ENOSYS, "no pidfd")
        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    out = LocalExecutor(seed=7).execute(HarnessJob(misbehave, {"mode": "hang"}, samples=3, timeout=1.0))
    assert out.status == Status.TIMEOUT and 1.0 <= out.process.wall_s < 30


def test_without_turns_the_harness_needs_no_token(sha256_o2):
    out = LocalExecutor(seed=4).execute(HarnessJob(sha256_o2, {"size": "1024"}, samples=3, min_sample_time=0.0005))
    assert out.status == Status.OK and len(out.data["ns"]) == len(out.data["t_ns"]) == 3


@pytest.mark.machine
def test_a_waiting_member_takes_no_cpu_from_the_one_measuring(sha256_o2):
    """While one member samples, the others sleep in read(): the measuring process is
    not switched out for them (no involuntary switch in most samples).  With the machine
    to itself: the other worker's processes on the group's CPU switch it out too (17 of
    60 samples once, beside the full suite)."""
    outs = LocalExecutor(seed=5).execute_group([_job(sha256_o2, 20) for _ in range(3)], [[0, 1, 2]] * 20)
    switched = sum(x > 0 for o in outs for x in o.data["invol_switches"])
    assert switched <= 0.25 * 60


def _rewarm_runs(path, size):
    """The same one-call-a-sample job (200 whole calls of re-warm asked) alone in its group
    and alternating with a twin: the lone member's output, the alternating one's, and the
    latter's mean sample ns."""
    def job():
        return HarnessJob(path, {"size": size}, samples=6, warmup=0.0, turns=True, timeout=60,
                          reps=1, verified=True, rewarm_calls=200)
    alone, = LocalExecutor(seed=6).execute_group([job()], [[0]] * 6)
    first, _ = LocalExecutor(seed=6).execute_group([job(), job()], [[0, 1]] * 6)
    assert alone.status == first.status == Status.OK
    return alone, first, sum(first.data["ns"]) / 6


def test_only_a_sample_after_another_member_is_re_warmed(sha256_o2):
    """A member re-warms a whole call at least (here 200, a sample being one) only when
    another member ran since its last sample: alone in its group it does so once, before
    its first sample (which follows nothing of its own); alternating with another,
    before each.  (256 KiB: more than the harness's small working set.)"""
    alone, first, per_sample = _rewarm_runs(sha256_o2, "262144")
    assert first.data["around_ns"] > 6 * 50 * per_sample  # 200 calls before each of 6 samples
    assert alone.data["around_ns"] < 0.5 * first.data["around_ns"]  # 1 re-warm of 6


def test_a_small_working_set_is_not_re_warmed_by_whole_calls(sha256_o2):
    """A kernel that notes a working set of at most 128 KiB refills it in microseconds
    after another member: an eighth of a sample at most, no whole calls.  (64 KiB: a call
    long enough that 200 of them before each sample stand far above preemptions.)"""
    alone, first, per_sample = _rewarm_runs(sha256_o2, "65536")
    assert first.data["notes"]["working_set_bytes"] <= 128 * 1024
    assert first.data["around_ns"] < 6 * 50 * per_sample
