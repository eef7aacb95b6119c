"""Crediting outcomes to the decision that produced them (no vLLM needed)."""

from banditk.adapter.ledger import DecisionLedger


def test_sync_order_credits_previous_step_and_excludes_idle_time():
    led = DecisionLedger()
    s0 = led.open_step(k=1, decision="d0", decoding=("a",), t_schedule=0.0)
    assert led.close_step(s0, t_end=1.0) is None
    s1 = led.open_step(k=2, decision="d1", decoding=("a",), t_schedule=5.0)  # idle 1..5
    entry, dur = led.close_step(s1, t_end=6.5, draft_s=0.1)
    assert entry.decision == "d0" and entry.k == 1 and dur == 1.5


def test_async_order_schedule_ahead_of_output():
    led = DecisionLedger()
    s0 = led.open_step(k=1, decision="d0", decoding=(), t_schedule=0.0)
    s1 = led.open_step(k=2, decision="d1", decoding=(), t_schedule=0.1)  # scheduled before s0's output
    assert led.close_step(s0, t_end=1.0, draft_s=0.2) is None
    s2 = led.open_step(k=3, decision="d2", decoding=(), t_schedule=1.05)
    entry, dur = led.close_step(s1, t_end=2.0)
    assert entry.decision == "d0" and entry.draft_s == 0.2 and abs(dur - 1.0) < 1e-12
    entry, dur = led.close_step(s2, t_end=3.0)
    assert entry.decision == "d1" and abs(dur - 1.0) < 1e-12


def test_lost_output_breaks_the_chain_instead_of_miscrediting():
    led = DecisionLedger()
    s0 = led.open_step(k=1, decision="d0", decoding=(), t_schedule=0.0)
    s1 = led.open_step(k=2, decision="d1", decoding=(), t_schedule=0.0)
    s2 = led.open_step(k=3, decision="d2", decoding=(), t_schedule=0.0)
    led.close_step(s0, t_end=1.0)
    assert led.close_step(s2, t_end=2.0) is None  # s1's output never came: s2 is not credited to d1
    assert led.num_open == 0
    assert led.close_step(s1, t_end=3.0) is None


def test_open_steps_are_bounded():
    led = DecisionLedger(max_open=4)
    for _ in range(10):
        led.open_step(k=0, decision=None, decoding=(), t_schedule=0.0)
    assert led.num_open == 4
