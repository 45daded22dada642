"""`StoreWatch`: a store's silence from the calls a replica makes anyway, said once each way."""

from __future__ import annotations

import asyncio
import logging

import pytest

from relay.errors import StoreError, StoreUnavailableError
from relay.publishing.logs import Reporter
from relay.publishing.storewatch import StoreWatch

logger = logging.getLogger("relay.test")


class Ticks:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watch(wait_s: float = 4.0) -> tuple[StoreWatch, list[str], Ticks]:
    lines: list[str] = []
    ticks = Ticks()
    return StoreWatch(wait_s, Reporter(lines.append, logger), ticks), lines, ticks


async def answer(value: int) -> int:
    return value


async def unavailable() -> None:
    raise StoreUnavailableError("relay store x is unavailable: no answer within 4s")


async def test_an_answering_store_is_never_silent() -> None:
    """Calls that answer leave no silence and say nothing."""
    found, lines, ticks = watch()
    assert await found.call(answer(1)) == 1
    ticks.now += 60
    assert (found.silent_s(), found.silent, lines) == (None, False, [])


async def test_a_call_given_up_is_silence_said_once_and_its_end_said_once() -> None:
    """A call that was not answered makes the store silent since it began (not reachable), but
    a quick refusal is the failed pass's own line; once the silence has lasted the wait it is
    warned of once however many calls follow; the next answer ends it, said once."""
    found, lines, ticks = watch()
    with pytest.raises(StoreUnavailableError):
        await found.call(unavailable())
    assert (found.silent, lines) == (True, [])
    for _ in range(2):
        ticks.now += 3
        with pytest.raises(StoreUnavailableError):
            await found.call(unavailable())
    assert found.silent_s() == 6.0
    assert [line.split(" for ")[0] for line in lines] == [
        "[relay] Talaria relay store has not answered"
    ]
    ticks.now += 2
    await found.call(answer(2))
    assert lines[1] == "[relay] Talaria relay store answers again after 8.0s"
    assert (found.silent_s(), found.silent, len(lines)) == (None, False, 2)


async def test_a_refusal_is_an_answer() -> None:
    """A store error other than unavailability (a refused write, a bad row) is an answer."""
    found, lines, _ = watch()

    async def refused() -> None:
        raise StoreError("relay store x failed: permission denied")

    with pytest.raises(StoreError):
        await found.call(refused())
    assert (found.silent_s(), lines) == (None, [])


async def test_a_call_in_flight_past_the_wait_is_said_while_it_still_waits() -> None:
    """A call that hangs is silence as soon as it has waited `wait_s`, before it ends."""
    lines: list[str] = []
    found = StoreWatch(0.05, Reporter(lines.append, logger))  # on the real monotonic clock
    hung = asyncio.Event()
    call = asyncio.ensure_future(found.call(hung.wait()))
    await asyncio.sleep(0.2)
    assert found.silent
    assert len(lines) == 1
    assert "has not answered" in lines[0]
    hung.set()
    await call
    assert "answers again" in lines[1]
    assert not found.silent
