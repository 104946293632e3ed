"""The align input (`gac.manifest/v1`): each weight's compressor-chosen dimension and importance.

Field names are a public contract (other tools write them): add optional fields,
never rename or drop. Every limit lives in the model so a 422 names the field.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, ValidationInfo, field_validator, model_validator

from gac.contracts.goal import Epsilon, MinGain, Objective, Window
from gac.contracts.measurements import MAX_DIM, PRINTABLE, Dtype

MANIFEST_SCHEMA: Final = "gac.manifest/v1"
MAX_WEIGHTS = 100_000  # a 400-layer model with 100+ weights per layer is still below this
MAX_TOKEN_SHAPES = 64


def _a_number(value: object) -> object:
    """JSON's true/false and numbers written as text are not numbers, though pydantic's lax mode would read them."""
    if isinstance(value, bool | str):
        raise ValueError(f"must be a number, not {'a boolean' if isinstance(value, bool) else 'text'} ({json.dumps(value)})")
    return value


ANumber = BeforeValidator(_a_number)  # in each numeric field's Annotated: true and "0.2" are refused by name
PosDim = Annotated[int, Field(ge=1, le=MAX_DIM, description=f"a dimension: at most {MAX_DIM:,}"), ANumber]
# What a model can have, generously: each bound is far above any released model (hidden 16,384 to
# 25,600, 128 query heads, head size 256, a 256k vocabulary as out_features) yet keeps one weight's
# parameters, its kernels' shapes and the service's cost estimate (service/align/cost.py) finite.
# A manifest past them is not a model: 422 names the field.
MAX_HIDDEN = 1 << 17
MAX_HEADS = 4096
MAX_HEAD_SIZE = 4096
MAX_BATCH = 1 << 16
Hidden = Annotated[int, Field(ge=1, le=MAX_HIDDEN, description=f"a model width: at most {MAX_HIDDEN:,}"), ANumber]
Heads = Annotated[int, Field(ge=1, le=MAX_HEADS, description=f"attention heads: at most {MAX_HEADS:,}"), ANumber]
HeadSize = Annotated[int, Field(ge=1, le=MAX_HEAD_SIZE, description=f"an attention head's size: at most {MAX_HEAD_SIZE:,}"), ANumber]
Batch = Annotated[int, Field(ge=1, le=MAX_BATCH, description=f"sequences per batch: at most {MAX_BATCH:,}"), ANumber]
Name = Annotated[str, Field(min_length=1, max_length=300, pattern=PRINTABLE)]
# Bounded so that sums over 100,000 weights stay finite and exact solvers stay in int64.
Importance = Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False), ANumber]
MAX_PARAMS = 10**15


class _Model(BaseModel):
    # Each field's docstring is its description in the JSON Schema (and the service's OpenAPI document).
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


class _WeightBase(_Model):
    # Each kind declares `dim` after its shape fields, so the dim check below sees them.
    # dim is continuous on purpose: a compressor's allocation is often fractional (1510.4).
    name: Name
    """The weight's name, unique in the manifest."""
    importance: Importance  # required: silently defaulting it would change the answer
    """How much the weight's kept parameters are worth, per parameter (relative; 1.0 for every weight when unknown)."""
    group: Annotated[str | None, Field(default=None, min_length=1, max_length=300, pattern=PRINTABLE)] = None
    """Weights with the same group name share one dim (one knapsack item); null: the weight stands alone."""

    if TYPE_CHECKING:
        dim: float

    @property
    def max_dim(self) -> int:
        raise NotImplementedError

    @property
    def unit_params(self) -> int:
        """Parameters per unit of d: every kind's count is linear in d (docs/manifest.md's params(d))."""
        raise NotImplementedError

    @field_validator("dim", check_fields=False)
    @classmethod
    def _dim_not_above_original(cls, v: float, info: ValidationInfo) -> float:
        original = cls._original_from(info.data)
        if original is not None and v > original:
            raise ValueError(f"dim {v} is above the original dimension {original}")
        return v

    @classmethod
    def _original_from(cls, data: dict) -> int | None:
        raise NotImplementedError


class LowRankWeight(_WeightBase):
    """W (out x in) replaced by A (in x d) and B (d x out)."""

    kind: Literal["lowrank"]
    """The weight's kind."""
    out_features: PosDim
    in_features: PosDim
    dim: Annotated[float, Field(gt=0, allow_inf_nan=False), ANumber]
    """The compressor's rank d (may be fractional): at most min(out_features, in_features)."""

    @classmethod
    def _original_from(cls, data: dict) -> int | None:
        if "out_features" in data and "in_features" in data:
            return min(data["out_features"], data["in_features"])
        return None

    @property
    def max_dim(self) -> int:
        return min(self.out_features, self.in_features)

    @property
    def unit_params(self) -> int:
        return self.in_features + self.out_features


class LinearOutWeight(_WeightBase):
    """A linear layer whose output features are pruned to d."""

    kind: Literal["linear_out"]
    """The weight's kind."""
    out_features: PosDim
    in_features: PosDim
    dim: Annotated[float, Field(gt=0, allow_inf_nan=False), ANumber]
    """The compressor's output features kept (may be fractional): at most out_features."""

    @classmethod
    def _original_from(cls, data: dict) -> int | None:
        return data.get("out_features")

    @property
    def max_dim(self) -> int:
        return self.out_features

    @property
    def unit_params(self) -> int:
        return self.in_features


class MlpWidthWeight(_WeightBase):
    """An MLP block whose intermediate width (`full`) is pruned to d."""

    kind: Literal["mlp_width"]
    """The weight's kind."""
    hidden: Hidden
    full: PosDim
    gated: StrictBool = True
    """Whether the block is gated (gate, up and down projections: 3 x d x hidden params; else 2 x d x hidden)."""
    dim: Annotated[float, Field(gt=0, allow_inf_nan=False), ANumber]
    """The compressor's intermediate width (may be fractional): at most full."""

    @classmethod
    def _original_from(cls, data: dict) -> int | None:
        return data.get("full")

    @property
    def max_dim(self) -> int:
        return self.full

    @property
    def unit_params(self) -> int:
        return (3 if self.gated else 2) * self.hidden


class HeadDimWeight(_WeightBase):
    """An attention layer whose head size (`full`) is reduced to d for q/k/v/o alike."""

    kind: Literal["head_dim"]
    """The weight's kind."""
    heads: Heads
    kv_heads: Heads | None = None
    """Key/value heads (GQA); null: as many as heads."""
    hidden: Hidden
    full: HeadSize
    batch: Batch = 1
    seq: PosDim | None = None
    """The SDPA sequence length; null: each workload token count."""
    dim: Annotated[float, Field(gt=0, allow_inf_nan=False), ANumber]
    """The compressor's head size (may be fractional): at most full."""

    @classmethod
    def _original_from(cls, data: dict) -> int | None:
        return data.get("full")

    @property
    def max_dim(self) -> int:
        return self.full

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads if self.kv_heads is not None else self.heads

    @property
    def unit_params(self) -> int:
        return self.hidden * 2 * (self.heads + self.n_kv_heads)


Weight = Annotated[
    LowRankWeight | LinearOutWeight | MlpWidthWeight | HeadDimWeight,
    Field(discriminator="kind"),
]


def shared_dim(members: Sequence[_WeightBase]) -> float:
    """The one dim a group's weights share at the compressor's choice: where they take the parameters their own dims
    take (their mean weighted by parameters per dim), so a budget of those parameters always holds the group.
    Exact, then rounded once: weights of one shape get their plain mean to the last bit."""
    if len(members) == 1:
        return float(members[0].dim)
    total = sum(Fraction(w.dim) * w.unit_params for w in members)
    return float(total / sum(w.unit_params for w in members))


def explained(error: Mapping[str, Any]) -> str:
    """A manifest's validation error in its author's words where pydantic's are about its own machinery: a weight
    with no `kind` names the kinds, and an unknown field says where a field of that name belongs, or the field here
    (else anywhere) it is closest to: a typo, most often."""
    if error["type"] == "union_tag_not_found":
        return f"no `kind`: every weight says which it is, one of {', '.join(_WEIGHT_MODELS)}"
    if error["type"] == "extra_forbidden" and error["loc"]:
        name, homes = str(error["loc"][-1]), _homes()
        if name in homes:
            return f"unknown field {name!r} here: it belongs in {' or '.join(sorted(homes[name]))}"
        if close := difflib.get_close_matches(name, _fields_at(error["loc"][:-1]), n=1, cutoff=0.75):
            return f"unknown field {name!r}: did you mean {close[0]!r}?"
        if close := difflib.get_close_matches(name, homes, n=1, cutoff=0.75):
            return f"unknown field {name!r}: did you mean {close[0]!r} (in {' or '.join(sorted(homes[close[0]]))})?"
        return f"unknown field {name!r}"
    return str(error["msg"]).removeprefix("Value error, ")


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


_WEIGHT_MODELS: dict[str, type[BaseModel]] = {get_args(m.model_fields["kind"].annotation)[0]: m for m in _models_in(Weight)}


def _fields(model: type[BaseModel]) -> list[tuple[str, list[type[BaseModel]]]]:
    """A model's fields as the input names them (aliases), each with the models it holds."""
    return [(info.alias or name, _models_in(info.annotation)) for name, info in model.model_fields.items()]


def _fields_at(path: Sequence[Any]) -> list[str]:
    """The field names of the model at a validation error's location (weights.3.lowrank: a lowrank weight's)."""
    models: list[type[BaseModel]] = [Manifest]
    for part in path:
        if isinstance(part, int):
            continue
        if part in _WEIGHT_MODELS:
            models = [_WEIGHT_MODELS[part]]
            continue
        models = [sub for m in models for name, subs in _fields(m) if name == part for sub in subs]
    return sorted({name for m in models for name, _ in _fields(m)})


@cache
def _homes() -> dict[str, set[str]]:
    """Each field name of the manifest's models, and where it belongs: "the top level", "budget", "a lowrank weight"."""
    homes: dict[str, set[str]] = {}

    def walk(model: type[BaseModel], where: str) -> None:
        for name, subs in _fields(model):
            homes.setdefault(name, set()).add(where)
            for sub in subs:
                kind = next((k for k, m in _WEIGHT_MODELS.items() if m is sub), None)
                walk(sub, f"a {kind} weight" if kind else name)

    walk(Manifest, "the top level")
    kinds = {f"a {kind} weight" for kind in _WEIGHT_MODELS}
    return {name: (where - kinds) | {"a weight"} if kinds <= where else where for name, where in homes.items()}


def kept_params(ratio: float, original: int) -> int:
    """The parameters a compression ratio rho (the share removed) keeps: floor((1 - rho) * original),
    with rho read as the decimal it was written as, so 0.8 of 1,000 keeps 200, not the 199 that
    (1 - 0.8) * 1000 = 199.99999999999994 floors to in binary floating point."""
    return math.floor((1 - Fraction(repr(float(ratio)))) * original)  # float(): a numpy float's repr names its type


class Budget(_Model):
    """Exactly one of: a compression ratio rho (the share of the listed weights' parameters removed),
    or an absolute parameter count to keep."""

    # The rule below, in the JSON Schema too: exactly one of the two is given and not null.
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["ratio"], "properties": {"ratio": {"type": "number"}}},
                {"required": ["params"], "properties": {"params": {"type": "integer"}}},
            ]
        }
    )

    ratio: Annotated[float, Field(ge=0, lt=1, allow_inf_nan=False), ANumber] | None = None
    """The share of the listed weights' original parameters removed: the budget is floor((1 - ratio) x original)."""
    params: Annotated[int, Field(ge=1, le=MAX_PARAMS), ANumber] | None = None
    """The parameters the aligned weights may take in all."""

    @model_validator(mode="after")
    def _exactly_one(self) -> Budget:
        if (self.ratio is None) == (self.params is None):
            raise ValueError("budget needs exactly one of 'ratio' or 'params'")
        return self


# Other spellings of a dtype that a manifest may use (the stored name is always Dtype's).
DTYPE_SPELLINGS: Final = {
    **{name: Dtype.float16 for name in ("fp16", "f16", "half", "torch.float16")},
    **{name: Dtype.bfloat16 for name in ("bf16", "torch.bfloat16")},
    **{name: Dtype.float32 for name in ("fp32", "f32", "float", "torch.float32")},
}


def dtype_named(text: str) -> str:
    """The canonical name of a dtype written another common way ("BF16", " float16", "torch.float32"), else the text
    as given (for the validator to refuse by name)."""
    key = text.strip().lower()
    return DTYPE_SPELLINGS.get(key, key if key in Dtype.__members__ else text)


# A dtype as compressors and configs write it (torch_dtype "bf16", "FP16"), read as Dtype's name.
SpelledDtype = Annotated[Dtype, BeforeValidator(lambda v: dtype_named(v) if isinstance(v, str) else v)]


class Target(_Model):
    """The platform to align for (an id or fingerprint the service knows)."""

    platform: Annotated[str, Field(min_length=1, max_length=200, pattern=PRINTABLE)]
    """The platform's id, fingerprint or a unique fingerprint prefix (8 characters or more)."""


class Workload(_Model):
    """What the model runs: the token counts (GEMM rows) its kernels see, their weights, and the dtype."""

    tokens: Annotated[list[PosDim], Field(min_length=1, max_length=MAX_TOKEN_SHAPES, json_schema_extra={"uniqueItems": True})]
    """The token counts (the GEMMs' M) the model runs at, each once, e.g. [1024] for prefill, [1] for decode."""
    dtype: SpelledDtype = Dtype.float16
    """The dtype its kernels are priced in (fp16, bf16, fp32 and the like are read as these)."""
    token_weights: Annotated[
        list[Annotated[float, Field(ge=0, le=1e12, allow_inf_nan=False), ANumber]] | None,
        # One per token count (checked below), not all zero: the schema says the latter.
        Field(default=None, max_length=MAX_TOKEN_SHAPES, json_schema_extra={"contains": {"exclusiveMinimum": 0}}),
    ] = None
    """How much each token count matters (e.g. prefill vs decode share), one per count; null: equal."""

    @field_validator("tokens")
    @classmethod
    def _each_count_once(cls, v: list[int]) -> list[int]:
        # Results and no_slower key their per-count figures by the count: a repeat would sum into one.
        if repeated := sorted({m for m in v if v.count(m) > 1}):
            raise ValueError(f"tokens lists {', '.join(map(str, repeated))} more than once: give each count once (token_weights weighs it)")
        return v

    @field_validator("token_weights")
    @classmethod
    def _weights_match_tokens(cls, v: list[float] | None, info: ValidationInfo) -> list[float] | None:
        if v is None:
            return v
        tokens = info.data.get("tokens")
        if tokens is not None and len(v) != len(tokens):
            raise ValueError(f"token_weights has {len(v)} entries but tokens has {len(tokens)}")
        if not math.fsum(v) > 0:
            raise ValueError("token_weights must not all be zero")
        return v

    def weighted_tokens(self) -> list[tuple[int, float]]:
        weights = self.token_weights or [1.0] * len(self.tokens)
        return [(m, w) for m, w in zip(self.tokens, weights) if w > 0]


class Manifest(_Model):
    """A gac.manifest/v1 document: a compressor's output (model, budget, weights and their dims) to align."""

    schema_: Literal["gac.manifest/v1"] = Field(default=MANIFEST_SCHEMA, alias="schema")
    """The document's schema name."""
    model: Annotated[str, Field(min_length=1, max_length=300, pattern=PRINTABLE)]
    """A name for the model, shown in results and the dashboard."""
    compressor: Annotated[str | None, Field(default=None, max_length=100, pattern=PRINTABLE)] = None
    """Which compressor chose the dims (asvd, palu, llm-pruner, ...); informative."""
    budget: Budget
    """How many parameters the aligned weights may take."""
    target: Target | None = None
    """The platform to align for; null: gac align's machine or POST /v1/align's ?platform=, else rules only."""
    workload: Workload = Workload(tokens=[1024])
    """The token counts, their weights and the dtype the kernels are priced at."""
    weights: Annotated[list[Weight], Field(min_length=1, max_length=MAX_WEIGHTS)]
    """The weights and their compressor-chosen dims; names unique."""
    # (gac.contracts.goal: the types the solver's options and the command line share.)
    objective: Objective | None = None
    """What to optimize; null: latency when the platform has measurements, else importance."""
    epsilon: Annotated[Epsilon, ANumber] | None = None
    """The share of the importance-only optimum's kept importance the latency objective may give up; null: 0.005."""
    # Kept importance is linear in the dim, a proxy that holds near the compressor's choice: the wider
    # window can trade one weight's rank for another's at little cost in that proxy.
    window: Window | None = None
    """The latency objective's candidates: gac (null) every measured dim within +/- max(16, 5 %) of the compressor's,
    not below half of it, up to the top of a measured step the window's top falls in; paper also the multiples of 8
    within +/- 64 (the paper's window)."""
    # The latency objective with two or more token counts may buy a faster prefill with a slower decode.
    no_slower: StrictBool | None = None
    """True holds every token count to no slower than the compressor's dims predict; null: false."""
    min_gain: Annotated[MinGain, ANumber] | None = None
    """The least share of predicted time the latency objective must save to give up any importance (below it, the
    fastest choice keeping all of importance-only GAC's importance is the answer); null: 0.02, timing noise."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("weights")
    @classmethod
    def _unique_names(cls, v: list) -> list:
        seen: set[str] = set()
        dupes: list[str] = []
        for w in v:
            if w.name in seen:
                dupes.append(w.name)
            seen.add(w.name)
        if dupes:
            raise ValueError(f"weight names must be unique; repeated: {sorted(set(dupes))[:5]}")
        # A group is one item of the result, named by its group: a weight outside it by that name would be a second.
        where = {w.name: i for i, w in enumerate(v)}
        for i, w in enumerate(v):
            if w.group is not None and (j := where.get(w.group)) is not None and v[j].group is None:
                raise ValueError(
                    f"weights.{i}.group {w.group!r} is also the name of weights.{j}, which is in no group: "
                    "the result names each group and each ungrouped weight once, so rename the group"
                )
        # A group shares one dim, centred on shared_dim: each member must be able to hold it.
        members: dict[str, list[int]] = {}
        for i, w in enumerate(v):
            if w.group is not None:
                members.setdefault(w.group, []).append(i)
        for group, ids in members.items():
            mean = shared_dim([v[i] for i in ids])
            i = min(ids, key=lambda j: v[j].max_dim)
            if mean > v[i].max_dim:
                raise ValueError(
                    f"group {group!r} shares one dim around its weights' mean weighted by parameters per dim, {mean:g}, "
                    f"which is above the largest weights.{i} ({v[i].name!r}) can take, {v[i].max_dim}: "
                    "a group's weights need dims close enough to share"
                )
        return v
