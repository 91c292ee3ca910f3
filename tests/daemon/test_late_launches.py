"""Launch calls that outlive their deadline, and calls that never left the queue.

A launch that answers after its deadline while a stop arrives is recorded when it lands,
then stopped and billed (the attempt is not ended while its own call is in flight); a call
cancelled unsent behind a provider's busy workers is reported "not sent" and left unstamped,
so it goes out on the next pass instead of after the cloud's visibility delay.
"""

from __future__ import annotations

import time
from datetime import timedelta

from providers.base import EndReason
from scheduler.core.states import AttemptEnd, AttemptState, JobState
from scheduler.state.desired import cancel
from tests.support.fakes import FakeProvider, offering


def _wait(cond, seconds: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def test_a_launch_that_lands_after_its_deadline_while_a_stop_arrives_is_stopped_and_billed(
    make_world,
):
    w = make_world(call_timeout="300ms")
    w.provider.faults.stall_s["launch"] = 1.0  # Azure's launch waits on NIC and IP pollers
    jid = w.submit(gpus="V100:1")
    w.tick()  # the call passes its deadline; it is still on the wire
    (a,) = w.attempts(jid)
    assert a.instance_id is None and a.launch_requested_at is not None
    cancel(w.rec.engine, jid, w.clock.now())
    w.tick()  # the stop finds nothing under the token yet: the call has not landed
    assert w.attempts(jid)[0].state is not AttemptState.ENDED
    assert _wait(lambda: w.attempts(jid)[0].instance_id is not None)  # recorded on landing
    w.tick(60)  # a minute later: the terminate went out at the first stop step after it landed
    w.tick()
    (a,) = w.attempts(jid)
    assert a.state is AttemptState.ENDED and a.end_reason is AttemptEnd.CANCELLED
    assert w.provider.instances[a.instance_id].end_reason is EndReason.TERMINATED
    assert a.started_at is not None and a.cost_usd > 0.9 * 55 / 3600  # billed, to its end
    assert w.job(jid).state is JobState.CANCELLED
    assert not w.provider.running()


def test_launch_calls_cancelled_unsent_are_not_stamped_and_go_out_next_pass(make_world):
    cloud = FakeProvider([offering("us-east-1a", price=0.9)], visibility_delay=timedelta(minutes=5))
    w = make_world(provider=cloud, call_timeout="1s")
    cloud.faults.stall_s["launch"] = 0.3  # four workers: about a dozen calls a second
    jobs = [w.submit(name=f"j{i}", gpus="V100:1") for i in range(24)]
    w.tick()
    first = {j: w.attempts(j)[0] for j in jobs}
    unsent = [j for j, a in first.items() if a.launch_requested_at is None]
    assert unsent, "every attempt is stamped as sent, though the queue backed up"
    assert all(first[j].state is AttemptState.LAUNCHING for j in unsent)
    assert all("not sent" in first[j].detail for j in unsent)
    assert w.events("launch_not_sent")
    cloud.faults.stall_s.clear()
    _wait(lambda: cloud.launch_calls >= 24 - len(unsent))  # the calls in flight land
    w.tick(n=2)  # ten seconds, far inside the five-minute visibility delay
    assert all(w.attempts(j)[0].instance_id is not None for j in jobs)
    assert all(len(w.attempts(j)) == 1 for j in jobs)  # none launched twice
    assert len(cloud.instances) == 24
