"""The manifest contract (gac/contracts/manifest.py): every validation error names its field (pydantic loc)."""

from __future__ import annotations

import copy
import json

import pytest
from pydantic import ValidationError

from gac.contracts import manifest as mf
from gac.contracts.manifest import Manifest

BASE = {
    "schema": "gac.manifest/v1",
    "model": "m",
    "budget": {"ratio": 0.15},
    "workload": {"tokens": [1024], "dtype": "float16"},
    "weights": [
        {"name": "a", "kind": "lowrank", "out_features": 64, "in_features": 32, "dim": 20.5, "importance": 1.0},
        {"name": "b", "kind": "mlp_width", "hidden": 64, "full": 256, "dim": 200, "importance": 0.5},
    ],
}


def _errors(doc) -> list[tuple[tuple, str]]:
    with pytest.raises(ValidationError) as err:
        Manifest.model_validate(doc)
    return [(e["loc"], e["msg"]) for e in err.value.errors()]


def _with(path: list, value):
    doc = copy.deepcopy(BASE)
    node = doc
    for key in path[:-1]:
        node = node[key]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return doc


def test_valid_base():
    m = Manifest.model_validate(BASE)
    assert m.weights[0].dim == 20.5 and m.weights[1].max_dim == 256


@pytest.mark.parametrize(
    ("path", "value", "loc_tail"),
    [
        (["weights", 0, "dim"], 0, "dim"),
        (["weights", 0, "dim"], -3, "dim"),
        (["weights", 0, "dim"], 33, "dim"),  # above min(out, in) = 32
        (["weights", 1, "dim"], 257, "dim"),  # above full
        (["weights", 0, "dim"], float("nan"), "dim"),
        (["weights", 0, "importance"], KeyError, "importance"),
        (["weights", 0, "importance"], float("nan"), "importance"),
        (["weights", 0, "importance"], float("inf"), "importance"),
        (["weights", 0, "importance"], -1, "importance"),
        (["weights", 0, "out_features"], 64.5, "out_features"),  # fractional where an integer is needed
        (["weights", 0, "in_features"], 0, "in_features"),
        (["weights", 1, "hidden"], -64, "hidden"),
        (["weights", 0, "kind"], "conv", "weights"),
        (["workload", "tokens"], [0], "tokens"),
        (["workload", "tokens"], [], "tokens"),
        (["workload", "tokens"], [10.5], "tokens"),
        (["workload", "token_weights"], [1.0, 2.0], "token_weights"),
        (["workload", "dtype"], "int3", "dtype"),
        (["budget"], {"ratio": 1.5}, "ratio"),
        (["budget"], {"ratio": float("nan")}, "ratio"),
        (["budget"], {"params": 0}, "params"),
        (["budget"], {"ratio": 0.1, "params": 5}, "budget"),
        (["budget"], {}, "budget"),
        (["schema"], "gac.manifest/v2", "schema"),
        (["weights"], [], "weights"),
    ],
)
def test_error_names_field(path, value, loc_tail):
    errors = _errors(_with(path, value))
    assert any(loc_tail in [str(p) for p in loc] for loc, _ in errors), errors


def test_error_location_points_at_the_weight():
    errors = _errors(_with(["weights", 1, "dim"], 300))
    assert errors[0][0] == ("weights", 1, "mlp_width", "dim") and "original dimension 256" in errors[0][1]


def test_duplicate_names():
    doc = _with(["weights", 1, "name"], "a")
    ((loc, msg),) = _errors(doc)
    assert loc == ("weights",) and "'a'" in msg


def test_weight_limit(monkeypatch):
    w = BASE["weights"][1]
    doc = {**BASE, "weights": [{**w, "name": f"w{i}"} for i in range(mf.MAX_WEIGHTS + 1)]}
    errors = _errors(doc)
    assert errors[0][0] == ("weights",) and "at most" in errors[0][1]


def test_extra_fields_are_refused():
    errors = _errors(_with(["weights", 0, "dimm"], 3))
    assert any("dimm" in [str(p) for p in loc] for loc, _ in errors)


@pytest.mark.parametrize(
    ("ratio", "original", "kept"),
    [(0.8, 1000, 200), (0.2, 1000, 800), (0.3, 1000, 700), (0.15, 4096 * 4096, 14260633), (0.0, 7, 7), (0.999, 10, 0)],
)
def test_a_ratio_keeps_the_decimal_share_it_names(ratio, original, kept):
    # (1 - 0.8) * 1000 is 199.99999999999994 in binary floating point: flooring it loses a parameter.
    assert mf.kept_params(ratio, original) == kept


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("bf16", "bfloat16"),
        ("FP16", "float16"),
        ("half", "float16"),
        ("fp32", "float32"),
        ("bfloat16", "bfloat16"),
        ("Float16", "float16"),
        (" bf16", "bfloat16"),
        ("torch.float32", "float32"),
    ],
)
def test_common_dtype_spellings_are_read_as_the_canonical_name(written, read):
    m = Manifest.model_validate(_with(["workload", "dtype"], written))
    assert m.workload.dtype == read and m.model_dump(by_alias=True)["workload"]["dtype"] == read


def test_an_unknown_dtype_is_still_refused_by_name():
    assert [loc for loc, _ in _errors(_with(["workload", "dtype"], "int8"))] == [("workload", "dtype")]


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        (["weights", 0, "dim"], True, "not a boolean (true)"),
        (["weights", 0, "out_features"], "64", 'not text ("64")'),
        (["weights", 0, "importance"], False, "not a boolean (false)"),
        (["budget"], {"ratio": "0.2"}, 'not text ("0.2")'),
        (["budget"], {"params": True}, "not a boolean (true)"),
        (["workload", "tokens"], ["128"], 'not text ("128")'),
        (["epsilon"], "0.01", 'not text ("0.01")'),
    ],
)
def test_a_boolean_or_a_number_written_as_text_is_not_a_number(path, value, said):
    # pydantic's lax mode reads true as 1 and "0.2" as 0.2: in a manifest they are mistakes, named as such.
    for errors in (_errors(_with(path, value)), _json_errors(_with(path, value))):
        assert any(f"must be a number, {said}" in msg for _, msg in errors), errors


def _json_errors(doc: dict) -> list[tuple[tuple, str]]:
    try:
        Manifest.model_validate_json(json.dumps(doc))
    except ValidationError as exc:
        return [(tuple(e["loc"]), e["msg"]) for e in exc.errors()]
    raise AssertionError("accepted")


def test_the_json_schema_speaks_json_schema():
    """Constraints read as JSON Schema's keywords (minimum, exclusiveMaximum), never pydantic's own (ge, lt)."""
    text = json.dumps(Manifest.model_json_schema())
    assert not any(f'"{k}":' in text for k in ("ge", "gt", "le", "lt")), text
    budget = Manifest.model_json_schema()["$defs"]["Budget"]["properties"]
    assert budget["ratio"]["anyOf"][0] == {"type": "number", "minimum": 0, "exclusiveMaximum": 1}


def test_a_group_named_like_an_ungrouped_weight_is_refused_naming_both():
    """The result names each group and each ungrouped weight once: a group called 'b' beside an ungrouped weight 'b'
    would list 'b' twice. A group named after one of its own members is fine, and so is one named after a weight
    in another group (that weight's item is its group's)."""
    doc = copy.deepcopy(BASE)
    doc["weights"][1]["dim"] = 35  # dims a group can share
    doc["weights"][0]["group"] = "b"
    [(loc, msg)] = _errors(doc)
    assert loc == ("weights",) and "weights.0.group 'b' is also the name of weights.1, which is in no group" in msg
    doc["weights"][1]["group"] = "b"  # now 'b' is in the group it names
    assert [w.group for w in Manifest.model_validate(doc).weights] == ["b", "b"]
    doc["weights"][1]["group"] = "g"  # 'b' is in group 'g': the items are 'b' and 'g'
    assert [w.group for w in Manifest.model_validate(doc).weights] == ["b", "g"]


def test_a_group_whose_shared_dim_one_member_cannot_hold_is_refused_naming_it():
    """A group shares one dim around its members' mean weighted by params per dim (a's 96, b's 192): 'a' (at most 32)
    beside a width of 200 would ask 'a' for 140, which no window of its could hold (the solver failed on an empty window)."""
    doc = copy.deepcopy(BASE)
    for w in doc["weights"]:
        w["group"] = "g"
    [(loc, msg)] = _errors(doc)
    assert loc == ("weights",) and "group 'g'" in msg and "140.167" in msg and "weights.0 ('a') can take, 32" in msg
    doc["weights"][1]["dim"] = 40  # the plain mean, 30.25, would fit; weighted, 33.5 does not
    assert "33.5" in _errors(doc)[0][1]
    doc["weights"][1]["dim"] = 35  # 30.17: both can hold it
    assert {w.group for w in Manifest.model_validate(doc).weights} == {"g"}


def test_a_groups_shared_dim_takes_the_params_its_members_dims_take():
    a, b = Manifest.model_validate(BASE).weights  # 96 and 192 params per dim
    assert mf.shared_dim([a, b]) * (96 + 192) == pytest.approx(96 * 20.5 + 192 * 200)
    assert mf.shared_dim([a]) == 20.5 and mf.shared_dim([a, a.model_copy(update={"dim": 20.6})]) == (20.5 + 20.6) / 2


@pytest.mark.parametrize("path", [["weights", 1, "gated"], ["no_slower"]])
def test_a_switch_written_as_text_or_a_number_is_refused_as_a_dim_written_as_text_is(path):
    """Lax pydantic reads "yes", "false" and 0 as booleans: a field that switches the model's shape (gated) or the
    objective (no_slower) takes JSON's true or false only."""
    for value in ("yes", "false", 0):
        [(loc, msg)] = _errors(_with(path, value))
        assert (loc[0], loc[-1]) == (path[0], path[-1]) and "valid boolean" in msg  # (a weight's loc names its kind too)
    assert Manifest.model_validate(_with(path, False)) is not None


def test_a_weight_without_kind_and_a_mistyped_field_are_explained_in_the_authors_words():
    """pydantic says 'Unable to extract tag using discriminator' and 'Extra inputs are not permitted'; the author
    of a manifest needs the kinds there are, and the field they probably meant."""
    doc = copy.deepcopy(BASE)
    del doc["weights"][1]["kind"]
    doc["budget"] = {"param": 1000}
    doc["weights"][0]["importnce"] = doc["weights"][0].pop("importance")
    with pytest.raises(ValidationError) as err:
        Manifest.model_validate(doc)
    said = {e["loc"]: mf.explained(e) for e in err.value.errors()}
    assert said[("weights", 1)] == "no `kind`: every weight says which it is, one of lowrank, linear_out, mlp_width, head_dim"
    assert said[("budget", "param")] == "unknown field 'param': did you mean 'params'?"
    assert said[("weights", 0, "lowrank", "importnce")] == "unknown field 'importnce': did you mean 'importance'?"
    extra = lambda *loc: mf.explained({"type": "extra_forbidden", "loc": loc, "msg": "Extra inputs are not permitted"})  # noqa: E731
    assert extra("zzz") == "unknown field 'zzz'"
    # A real field at the wrong level says where it belongs (it is not its own closest match), and a typo of a field
    # that is not at this level says where that one is.
    assert extra("dtype") == "unknown field 'dtype' here: it belongs in workload"
    assert extra("weights", 0, "lowrank", "hidden") == "unknown field 'hidden' here: it belongs in a head_dim weight or a mlp_width weight"
    assert extra("name") == "unknown field 'name' here: it belongs in a weight"
    assert extra("param") == "unknown field 'param': did you mean 'params' (in budget)?"


def test_a_token_count_given_twice_is_refused_naming_it():
    """Per-count figures (latency.by_tokens, no_slower's weights) are keyed by the count: [16, 16] summed two
    counts' times into one M=16 entry at twice its time. token_weights is how a count is made to matter more."""
    [(loc, msg)] = _errors(_with(["workload", "tokens"], [16, 1, 16]))
    assert loc == ("workload", "tokens") and "16 more than once" in msg and "token_weights" in msg
    assert Manifest.model_json_schema()["$defs"]["Workload"]["properties"]["tokens"]["uniqueItems"] is True
