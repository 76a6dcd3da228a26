"""A ring of shared-memory stages handed from a producer to consumers by arrival barriers
(kd.arrival_barriers): the set-up of its two barrier arrays and the step from one stage to
the next. Used by kernels that feed group products with bulk copies (the MoE experts'
roles kernels, benchmarks/bulk_gemm.py)."""
from __future__ import annotations

import kerneldsl as kd


@kd.func
def stage_barriers(S, CONSUMER_PLANES):
    """The `full` and `empty` barriers of an S-stage ring, set up: `full` completes when a
    stage's copies have landed (one arrival: the issuing unit's byte count), `empty` when each
    of CONSUMER_PLANES planes has arrived, i.e. is through with the stage."""
    full = kd.arrival_barriers(S)
    empty = kd.arrival_barriers(S)
    if kd.unit_pos_x() == 0:
        for s in kd.unroll(S):
            kd.barrier_init(full, s, 1)
            kd.barrier_init(empty, s, CONSUMER_PLANES)
    kd.sync_cube()
    return full, empty


@kd.func
def ring_start():
    """(refill, rphase, slot, phase, last) at the ring's start: the producer's next stage to
    refill and the parity of its `empty` phase; the consumers' stage of this step, the parity
    of its `full` phase, and the stage of their last step."""
    return 0, 0, 0, 0, 0


@kd.func
def next_stage(slot, phase, S):
    """The ring position after `slot`: the next stage, and the parity of its phase (flipped
    when the ring wraps). Positions are counters, never divided: a division or remainder of a
    possibly negative value between a group product's issue and its wait made ptxas serialise
    the products."""
    slot += 1
    if slot == S:
        slot = 0
        phase ^= 1
    return slot, phase
