"""A small discrete-event core in the style of SimPy.

Events sit in a priority queue ordered by ``(time, priority, counter)``; the counter breaks ties
so that events scheduled at the same time fire in the order they were scheduled, which keeps a
simulation deterministic. Processes are generators that ``yield`` events and are resumed with the
event's value when it fires; :meth:`Process.interrupt` throws an :class:`Interrupt` carrying a
``cause`` into a waiting process (this is how revocations reach the training job).

Example::

    env = Environment()
    def clock(env, out):
        while True:
            out.append(env.now)
            yield env.timeout(1.0)
    out = []
    env.process(clock(env, out))
    env.run(until=3.5)
    assert out == [0.0, 1.0, 2.0, 3.0]
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Generator
from itertools import count
from typing import Any

URGENT = 0
NORMAL = 1

_PENDING = object()


class Interrupt(Exception):
    """Thrown into a process by :meth:`Process.interrupt`; ``cause`` says why."""

    def __init__(self, cause: Any = None) -> None:
        super().__init__(cause)
        self.cause = cause


class Event:
    """Something that happens at a point in simulated time; processes wait on it."""

    __slots__ = ("env", "callbacks", "_value", "ok")

    def __init__(self, env: "Environment") -> None:
        self.env = env
        self.callbacks: list[Callable[[Event], None]] | None = []
        self._value: Any = _PENDING
        self.ok = True

    @property
    def triggered(self) -> bool:
        return self._value is not _PENDING

    @property
    def processed(self) -> bool:
        return self.callbacks is None

    @property
    def value(self) -> Any:
        if self._value is _PENDING:
            raise RuntimeError("event has no value yet")
        return self._value

    def succeed(self, value: Any = None) -> "Event":
        """Trigger the event now (its callbacks run when the queue reaches it)."""
        if self._value is not _PENDING:
            raise RuntimeError("event already triggered")
        self._value = value
        self.env.schedule(self)
        return self


class Timeout(Event):
    """An event that fires ``delay`` seconds from now."""

    __slots__ = ()

    def __init__(self, env: "Environment", delay: float, value: Any = None) -> None:
        if delay < 0:
            raise ValueError(f"negative delay {delay}")
        Event.__init__(self, env)
        self._value = value
        env.schedule(self, delay)


class _Initialize(Event):
    __slots__ = ()

    def __init__(self, env: "Environment", process: "Process") -> None:
        Event.__init__(self, env)
        self.callbacks = [process._resume]
        self._value = None
        env.schedule(self, 0.0, URGENT)


class _Interruption(Event):
    __slots__ = ("process",)

    def __init__(self, process: "Process", cause: Any) -> None:
        Event.__init__(self, process.env)
        self.process = process
        self.ok = False
        self._value = Interrupt(cause)
        self.callbacks = [self._deliver]
        self.env.schedule(self, 0.0, URGENT)

    def _deliver(self, event: Event) -> None:
        process = self.process
        if process._value is not _PENDING:
            return  # the process ended before the interrupt arrived
        # Detach the process from whatever it was waiting for, then throw the interrupt in.
        target = process._target
        if target is not None and target.callbacks is not None:
            try:
                target.callbacks.remove(process._resume)
            except ValueError:
                pass
        process._resume(self)


class Process(Event):
    """Runs a generator; the process itself is an event that fires when the generator returns."""

    __slots__ = ("_generator", "_target", "name")

    def __init__(self, env: "Environment", generator: Generator[Event, Any, Any], name: str = "") -> None:
        Event.__init__(self, env)
        self._generator = generator
        self._target: Event | None = _Initialize(env, self)
        self.name = name

    @property
    def is_alive(self) -> bool:
        return self._value is _PENDING

    def interrupt(self, cause: Any = None) -> None:
        """Throw :class:`Interrupt` ``(cause)`` into the process at the current time."""
        if self._value is not _PENDING:
            raise RuntimeError(f"{self.name or 'process'} has terminated and cannot be interrupted")
        _Interruption(self, cause)

    def _resume(self, event: Event) -> None:
        env = self.env
        env.active_process = self
        while True:
            try:
                if event.ok:
                    nxt = self._generator.send(event._value)
                else:
                    nxt = self._generator.throw(event._value)
            except StopIteration as stop:
                self._target = None
                self._value = stop.value
                env.schedule(self)
                break
            if nxt.callbacks is not None:
                # Not processed yet: wait for it.
                nxt.callbacks.append(self._resume)
                self._target = nxt
                break
            # Already processed: resume immediately with its value.
            event = nxt
        env.active_process = None


class Environment:
    """Simulated clock plus the event queue."""

    def __init__(self, initial_time: float = 0.0) -> None:
        self.now = float(initial_time)
        self._queue: list[tuple[float, int, int, Event]] = []
        self._eid = count()
        self.active_process: Process | None = None

    def schedule(self, event: Event, delay: float = 0.0, priority: int = NORMAL) -> None:
        heapq.heappush(self._queue, (self.now + delay, priority, next(self._eid), event))

    def timeout(self, delay: float, value: Any = None) -> Timeout:
        return Timeout(self, delay, value)

    def event(self) -> Event:
        return Event(self)

    def process(self, generator: Generator[Event, Any, Any], name: str = "") -> Process:
        return Process(self, generator, name)

    def call_at(self, time: float, fn: Callable[[], None], priority: int = NORMAL) -> None:
        """Run a plain callback ``fn()`` at ``time`` (lighter than an event or a process)."""
        heapq.heappush(self._queue, (time if time > self.now else self.now, priority, next(self._eid), fn))

    def step(self) -> None:
        self.now, _, _, event = heapq.heappop(self._queue)
        if not isinstance(event, Event):
            event()  # a plain callback from call_at
            return
        callbacks, event.callbacks = event.callbacks, None
        for cb in callbacks or ():
            cb(event)

    def run(self, until: float | Event | None = None) -> Any:
        """Process events until the queue is empty, ``until`` seconds, or the event ``until`` fires."""
        queue = self._queue
        if isinstance(until, Event):
            stop = until
            while stop.callbacks is not None and queue:
                self.step()
            return stop._value if stop.triggered else None
        limit = float("inf") if until is None else float(until)
        while queue and queue[0][0] <= limit:
            self.step()
        if until is not None and self.now < limit:
            self.now = limit
        return None
