from spottrain.sim.core import Environment, Interrupt


def test_timeouts_fire_in_time_order_and_ties_in_schedule_order():
    env = Environment()
    seen = []
    for name, delay in [("b", 2.0), ("a", 1.0), ("c", 2.0), ("d", 2.0)]:
        env.timeout(delay).callbacks.append(lambda e, n=name: seen.append((env.now, n)))
    env.run()
    assert seen == [(1.0, "a"), (2.0, "b"), (2.0, "c"), (2.0, "d")]


def test_process_generator_and_run_until():
    env = Environment()
    ticks = []

    def clock():
        while True:
            ticks.append(env.now)
            yield env.timeout(1.0)

    env.process(clock())
    env.run(until=3.5)
    assert ticks == [0.0, 1.0, 2.0, 3.0]
    assert env.now == 3.5


def test_interrupt_carries_cause_and_detaches_from_the_awaited_event():
    env = Environment()
    log = []

    def worker():
        try:
            yield env.timeout(10.0)
            log.append("finished")
        except Interrupt as intr:
            log.append((env.now, intr.cause))
        yield env.timeout(1.0)
        log.append(("after", env.now))

    proc = env.process(worker())
    env.call_at(4.0, lambda: proc.interrupt("revoked n3"))
    env.run()
    assert log == [(4.0, "revoked n3"), ("after", 5.0)]  # the 10 s timeout did not resume it


def test_process_value_and_waiting_on_a_process():
    env = Environment()

    def child():
        yield env.timeout(2.0)
        return 42

    def parent(out):
        value = yield env.process(child())
        out.append((env.now, value))

    out = []
    env.process(parent(out))
    env.run()
    assert out == [(2.0, 42)]
