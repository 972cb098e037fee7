"""The specs cross into the fetch processes as they are: picklable, and the auth header never in their repr."""

from __future__ import annotations

import pickle

from streams.codecs.schemas import CatalogSpec, InlineSchema, ModelSpec, TopicModels, models_for
from streams.codecs.schemas.spec import matches


def test_it_pickles_every_spec_unchanged() -> None:
    catalog = CatalogSpec("c", "inline", schemas=(InlineSchema("s-*", 2, "json", "{}"),))
    models = TopicModels("orders.*", key=ModelSpec("string"), value=ModelSpec("avro", catalog="c", strategy="topic"))

    assert pickle.loads(pickle.dumps((catalog, models))) == (catalog, models)  # noqa: S301  (our own bytes)


def test_it_hides_the_auth_header_from_its_repr() -> None:
    assert "s3cret" not in repr(CatalogSpec("r", "karapace", url="http://r", auth="Basic s3cret"))


def test_it_finds_a_topics_models_by_exact_name_before_a_pattern() -> None:
    wildcard, exact = TopicModels("orders-*"), TopicModels("orders-eu")

    assert models_for("orders-eu", [wildcard, exact]) is exact
    assert models_for("orders-us", [wildcard, exact]) is wildcard
    assert models_for("refunds", [wildcard, exact]) is None
    assert matches("a*c*", "abc")
    assert matches("a.*", "a.")
    assert not matches("a.*", "ab")
