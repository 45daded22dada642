"""The Postgres schema in a store URL: `?schema=NAME` becomes the connection's search_path, one
reading of it names the schema for `migrate` and `grants`, and a bad one is refused."""

from __future__ import annotations

import pytest

from relay.errors import InvalidInputError
from relay.store.url import resolve, schema_name


def test_schema_parameter_becomes_the_search_path() -> None:
    """`?schema=relay` connects with `-csearch_path=relay`; the URL shown keeps what was typed."""
    target = resolve("postgresql://u:pw@db/app?schema=relay&application_name=web")
    url = target.sqlalchemy_url
    assert url.query["options"] == "-csearch_path=relay"
    assert "schema" not in url.query
    assert schema_name(url) == "relay"
    assert target.display == "postgresql://u:***@db/app?schema=relay&application_name=web"


@pytest.mark.parametrize(
    ("written", "schema"),
    [
        ("postgresql://u@db/app?options=-csearch_path%3Drelay", "relay"),
        ("postgresql://u@db/app?options=-c%20search_path%3Drelay,public", "relay"),
        ("postgresql://u@db/app?options=--search_path%3Dr2", "r2"),
        ("postgresql://u@db/app?options=-csearch_path%3Dpublic", None),
        ("postgresql://u@db/app?options=-cstatement_timeout%3D5s", None),
        ("postgresql://u@db/app", None),
    ],
)
def test_the_search_path_option_names_the_schema(written: str, schema: str | None) -> None:
    """The libpq spelling names the same schema (its first entry; public is not one of its own)."""
    assert schema_name(resolve(written).sqlalchemy_url) == schema


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("postgresql://u@db/app?schema=Relay", "schema='Relay'"),
        ("postgresql://u@db/app?schema=re%22lay", "lowercase name"),
        ("postgresql://u@db/app?schema=1relay", "lowercase name"),
        ("postgresql://u@db/app?schema=" + "r" * 64, "lowercase name"),
        ("postgresql://u@db/app?schema=a&options=-csearch_path%3Db", "both schema"),
        ("postgresql://u@db/app?options=-csearch_path%3DRe%3Blay", "search_path schema"),
    ],
)
def test_a_bad_schema_is_refused(written: str, said: str) -> None:
    """A schema that is not a plain lowercase identifier, or given twice, is bad input."""
    with pytest.raises(InvalidInputError, match=said):
        resolve(written)
