"""gac.documents: where a JSON document gives a key twice, said as a path."""

from __future__ import annotations

import pytest

from gac.documents import duplicate_key


@pytest.mark.parametrize(
    "text,where",
    [
        ('{"a": 1, "b": {"c": 2}}', None),
        ('{"a": 1, "a": 2}', ("a",)),
        ('{"w": [{"d": 1}, {"d": 1, "e": 2, "d": 3}]}', ("w", 1, "d")),
        ('{"x": {"k": 1, "k": 2}, "y": {"j": 1, "j": 2}}', ("x", "k")),  # the first in the document's order
        ('[[{"a": 1}], [{"b": 1, "b": 1}]]', (1, 0, "b")),
        ('{"a": [1, 2, [3, {"q": 1}]], "z": {"q": 0, "q": 0}}', ("z", "q")),
        ("not json", None),  # the parser says why, not this
        ('{"w": {"a": 1, "a": 2}, "b": }', None),  # given twice before a syntax error: the parser's error comes first
        ('{"w": {"a": 1, "a": 2}, "b": ' + "[" * 5000 + "]" * 5000 + "}", None),  # ... or before nesting past its depth
        ('{"a": ' * 5000 + "1" + "}" * 5000, None),  # nested past the parser's depth: its error, not a crash here
    ],
)
def test_the_path_to_a_key_given_twice(text, where):
    assert duplicate_key(text) == where
    assert duplicate_key(text.encode()) == where
