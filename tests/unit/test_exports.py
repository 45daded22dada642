"""The public names: `relay.__all__` is sorted and names every public class it imports."""

from __future__ import annotations

import inspect

import relay
import relay.errors


def test_all_is_sorted_and_resolves() -> None:
    """Every name in `__all__` exists, and the list is sorted."""
    assert relay.__all__ == sorted(relay.__all__)
    assert all(hasattr(relay, name) for name in relay.__all__)


def test_every_error_is_exported() -> None:
    """Each exception of `relay.errors` can be caught as `relay.<Name>`."""
    errors = {
        name
        for name, value in vars(relay.errors).items()
        if inspect.isclass(value) and issubclass(value, Exception)
    }
    assert errors <= set(relay.__all__)
