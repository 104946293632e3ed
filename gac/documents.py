"""JSON and YAML documents with a key given twice refused, and YAML read as its JSON would be (YAML 1.2's numbers).

PyYAML follows YAML 1.1, where `1e-3` (no dot) is a string, not a number: an importance of 2e-5 in a
YAML manifest would reach the manifest's checks as text. Its mappings keep the last of two equal keys,
where the author meant one of them."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml


class DuplicateKey(ValueError):
    """A mapping gives one key twice."""


GIVEN_TWICE = "given twice in one object: which value is meant is ambiguous"  # what a 422 says of a duplicate key


class _Loader(yaml.SafeLoader):
    pass


def no_duplicate_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """A mapping's pairs as a dict, DuplicateKey where one key comes twice (json.loads' object_pairs_hook too)."""
    out: dict[Any, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKey(f"key {key!r} appears twice")
        out[key] = value
    return out


class _Pairs(list[tuple[str, Any]]):
    """A JSON object's pairs in their order, duplicates kept (json.loads' object_pairs_hook)."""


def duplicate_key(text: str | bytes) -> tuple[str | int, ...] | None:
    """Where a JSON document first gives a key twice, as a path (("weights", 3, "dim")); None where no object
    does, or it is not JSON (its parser says why). The quick check first: the search only for a document that has one."""
    try:
        json.loads(text, object_pairs_hook=no_duplicate_keys)
        return None
    except DuplicateKey:
        pass
    except (ValueError, RecursionError):
        return None
    try:  # the quick check stopped at the key: what follows it may not parse (the parser's error says so then)
        doc = json.loads(text, object_pairs_hook=_Pairs)
    except (ValueError, RecursionError):
        return None
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), doc)]
    while stack:  # depth first, in the document's order
        path, node = stack.pop()
        if isinstance(node, _Pairs):
            seen: set[str] = set()
            for key, _ in node:
                if key in seen:
                    return (*path, key)
                seen.add(key)
            stack.extend(((*path, k), v) for k, v in reversed(node))
        elif isinstance(node, list):
            stack.extend(((*path, i), v) for i, v in reversed(list(enumerate(node))))
    return None  # not reached: the quick check found one


def _mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    return no_duplicate_keys([(loader.construct_object(k, deep=True), loader.construct_object(v, deep=True)) for k, v in node.value])


# YAML 1.2's float (the core schema), beside 1.1's: 1e-3 and 2E5 are numbers, as in JSON.
_FLOAT_1_2 = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$|^[-+]?\.(inf|Inf|INF)$|^\.(nan|NaN|NAN)$")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT_1_2, list("-+0123456789."))
_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)


def load_yaml(text: str | bytes) -> Any:
    """The document: yaml.YAMLError where it is not YAML, DuplicateKey where a mapping repeats a key."""
    return yaml.load(text, Loader=_Loader)  # noqa: S506 - a SafeLoader subclass
