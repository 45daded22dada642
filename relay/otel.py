"""The OpenTelemetry provider of one signal (metrics, traces), looked up each time it is used.

The API's global provider is read from the API's own attribute, not through `get_*_provider()`
(which reads os.environ on every call): None until an SDK is set, and then nothing is made. The
getter is still called while unset if the environment names a provider for the API to load, or if
the API moved its global. What a provider gives (instruments, a tracer) is made once per provider.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_LOOK_UP = object()


class Chosen(Generic[T]):
    """The provider `use()` named, else the API's global one, and what `make` made from it."""

    def __init__(
        self,
        get_global: Callable[[], Any] | None,
        where: tuple[object, str],
        environment: str,
        no_sdk: tuple[str, ...],
        make: Callable[[Any], T],
    ) -> None:
        """`get_global` is None without the optional extra; `where` holds the API's global;
        `no_sdk` names the API's default providers (what they hand out records nothing)."""
        self._get_global = get_global
        self._holder, self._attribute = where
        self._from_environment = environment in os.environ
        self._no_sdk = no_sdk
        self._make = make
        self._override: Any = None
        self._provider: Any = None
        self._made: T | None = None

    def use(self, provider: Any) -> None:
        """Use `provider` from now on; None goes back to the global provider."""
        self._override = provider

    def current(self) -> T | None:
        """What the provider in use gave, or None while no SDK is installed (record nothing)."""
        if self._get_global is None:
            return None
        provider = self._override
        if provider is None:
            provider = getattr(self._holder, self._attribute, _LOOK_UP)
            if provider is None and not self._from_environment:
                return None
            if provider is None or provider is _LOOK_UP:
                provider = self._get_global()
        if provider is not self._provider:
            no_sdk = type(provider).__name__ in self._no_sdk
            self._made = None if no_sdk else self._make(provider)
            self._provider = provider
        return self._made
