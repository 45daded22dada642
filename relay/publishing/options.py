"""`PublisherOptions`: how a replica's publisher paces itself, one typed value the service
hands to each publisher it makes (`RelayService(..., publishing=PublisherOptions(lease_s=30))`)."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from math import isfinite

from relay.errors import InvalidInputError
from relay.publishing.leases import DEFAULT_HEARTBEAT_S, DEFAULT_LEASE_S


def _new_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True, kw_only=True)
class PublisherOptions:
    """The publisher's tunables, checked when made (a bad value is an `InvalidInputError`).

    `lease_s`: how long this replica's claims and runs outlive it (1..3600 s; every replica of a
    store should use the same). `heartbeat_s`: how often it republishes when nothing changed
    (1..3600 s). `background`: passes run on their own (False: only when a test calls them).
    `uniform(low, high)`: the jitter of retry delays (a test pins it). `new_id()`: the id of each
    snapshot sent (a test pins it).
    """

    lease_s: float = DEFAULT_LEASE_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    background: bool = True
    uniform: Callable[[float, float], float] = random.uniform
    new_id: Callable[[], str] = _new_id

    def __post_init__(self) -> None:
        for name in ("lease_s", "heartbeat_s"):
            value = getattr(self, name)
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number and isfinite(value) and 1 <= value <= 3600):
                raise InvalidInputError(
                    f"{name} must be a number of seconds in 1..3600, not {value!r}: "
                    f"PublisherOptions({name}=20)"
                )
        if not isinstance(self.background, bool):
            raise InvalidInputError("background must be True or False")
        if not callable(self.uniform) or not callable(self.new_id):
            raise InvalidInputError("uniform and new_id must be callables")
