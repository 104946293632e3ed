"""Turn real compressor outputs into a gac.manifest/v1.

- ASVD / SVD-LLM: `truncation_ranks` {module: rank} in the saved model's config.json
- PaLU: `head_wise_ranks` {module: [rank per head group]} in config.json
- LLM-Pruner / Torch-Pruning: a per-layer width map {module: kept width}, shapes from the
  original model's config.json

Importance comes from a JSON map {name: score}; without one every weight gets 1.0
and the result carries a warning, because the knapsack then only trades parameters.
A key of the map that names no weight is an error (a misspelled name would
otherwise leave its weight unscored or silently scored by another key).

The structure of the model is respected, not just each entry's size:

- a low-rank factor's rank is a whole number in [1, min(out, in)];
- in a width map, the gate and up projections of one MLP multiply elementwise, so
  they are one `mlp_width` weight with one width (down_proj's input follows it);
- attention pruned by heads keeps widths that are whole heads (multiples of
  head_dim). gac.manifest/v1 has no head-count weight, so those widths are checked
  and reported but stay as the compressor left them (outside the manifest);
- o_proj / down_proj only consume a pruned width: their output is the hidden size,
  which width pruning does not change.

Every problem raises ImportErrorDetail with one line that names the entry.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gac.contracts.manifest import Manifest
from gac.solver.kinds import unit_params


class ImportErrorDetail(ValueError):
    """A compressor output that cannot be turned into a manifest; the message names the entry."""


@dataclass
class Imported:
    manifest: Manifest
    warnings: list[str] = field(default_factory=list)  # what may make the answer wrong
    notes: list[str] = field(default_factory=list)  # what the importer assumed or left out
    shapes: Shapes | None = None  # the model config the shapes came from


@dataclass(frozen=True)
class Shapes:
    """The original model's dimensions, read from a Hugging Face config."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int | None = None

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any], where: str = "model config") -> Shapes:
        def get(*keys: str) -> int | None:
            for key in keys:
                if cfg.get(key) is not None:
                    return _positive_int(cfg[key], f"{where}: {key!r}")
            return None

        def need(*keys: str) -> int:
            value = get(*keys)
            if value is None:
                raise ImportErrorDetail(f"{where} lacks {' / '.join(repr(k) for k in keys)}")
            return value

        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        inter = need("intermediate_size", "ffn_dim")
        kv = get("num_key_value_heads") or heads
        if heads % kv:
            raise ImportErrorDetail(f"{where}: {heads} attention heads do not split into {kv} key/value heads")
        head_dim = get("head_dim")
        if head_dim is None:
            if hidden % heads:
                raise ImportErrorDetail(f"{where}: hidden_size {hidden} is not a multiple of {heads} heads; give 'head_dim'")
            head_dim = hidden // heads
        return cls(hidden, inter, heads, kv, head_dim, get("num_hidden_layers"))

    def describe(self) -> str:
        layers = f", {self.layers} layers" if self.layers else ""
        return (f"hidden {self.hidden}, intermediate {self.intermediate}, {self.heads} heads "
                f"({self.kv_heads} key/value) of head_dim {self.head_dim}{layers}")  # fmt: skip

    def linear(self, module: str) -> tuple[int, int]:
        """(out_features, in_features) of a projection, from the last part of its module name."""
        leaf = module.rsplit(".", 1)[-1]
        h, i, q, kv = self.hidden, self.intermediate, self.heads * self.head_dim, self.kv_heads * self.head_dim
        table = {
            "q_proj": (q, h), "k_proj": (kv, h), "v_proj": (kv, h), "o_proj": (h, q), "out_proj": (h, q),
            "gate_proj": (i, h), "up_proj": (i, h), "down_proj": (h, i), "fc1": (i, h), "fc2": (h, i),
        }  # fmt: skip
        if leaf not in table:
            raise ImportErrorDetail(f"{module}: unknown projection {leaf!r} (known: {', '.join(sorted(table))})")
        self.check_layer(module)
        return table[leaf]

    def check_layer(self, module: str) -> None:
        layer = layer_of(module)
        if layer is not None and self.layers is not None and layer >= self.layers:
            raise ImportErrorDetail(f"{module}: layer {layer} does not exist: the model has {self.layers} layers (0..{self.layers - 1})")


_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)(?:\.|$)")


def layer_of(module: str) -> int | None:
    m = _LAYER.search(module)
    return int(m.group(1)) if m else None


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ImportErrorDetail(f"{what} must be a whole number, not {value!r}")
    if value != int(value):
        raise ImportErrorDetail(f"{what} must be a whole number, not {value!r}")
    if value < 1:
        raise ImportErrorDetail(f"{what} must be at least 1, not {value!r}")
    return int(value)


def load_json(path: str | Path, what: str = "") -> dict[str, Any]:
    """A JSON object from a file (YAML when its name ends in .yaml or .yml, as `gac align` reads a
    manifest); every problem (unreadable, malformed, not an object) is ImportErrorDetail."""
    label = f"{what} {path}".strip()
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # a byte-order mark, as some editors save one, is not the document's
    except OSError as exc:
        raise ImportErrorDetail(f"cannot read {label}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ImportErrorDetail(f"{label} is not UTF-8 text") from None
    return parse_document(text, label, as_yaml=Path(path).suffix.lower() in (".yaml", ".yml"))


def parse_document(text: str, label: str, as_yaml: bool = False) -> dict[str, Any]:
    """A JSON (or YAML) object from its text: malformed, a key twice, or not an object is ImportErrorDetail naming `label`."""
    if as_yaml:
        return _load_yaml(text, label)
    from gac.documents import DuplicateKey, duplicate_key, no_duplicate_keys

    try:
        data = json.loads(text, object_pairs_hook=no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise ImportErrorDetail(f"{label} is not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except DuplicateKey as exc:
        within = ".".join(str(part) for part in (duplicate_key(text) or ())[:-1])  # the object that gives it twice
        raise ImportErrorDetail(f"{label}: {f'in {within}: ' if within else ''}{exc}") from None
    except RecursionError:
        raise ImportErrorDetail(f"{label} is nested too deeply") from None
    if not isinstance(data, dict):
        raise ImportErrorDetail(f"{label}: expected a JSON object at the top level, got {_json_type(data)}")
    return data


def _load_yaml(text: str, label: str) -> dict[str, Any]:
    """load_json's YAML reading: the same checks (a duplicate key is an error, the top level an object)."""
    import yaml

    from gac.documents import DuplicateKey, load_yaml

    try:
        data = load_yaml(text)  # YAML 1.2's numbers (1e-3 is one), a key twice refused
    except DuplicateKey as exc:
        raise ImportErrorDetail(f"{label}: {exc}") from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ImportErrorDetail(f"{label} is not valid YAML: {exc.problem}{where}") from None
    except yaml.YAMLError as exc:
        raise ImportErrorDetail(f"{label} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ImportErrorDetail(f"{label}: expected a mapping (object) at the top level, got {_json_type(data)}")
    return data


def _json_type(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(value), "a number")


def load_importance(path: str | Path) -> dict[str, float]:
    """A JSON map {weight name: score}; scores finite and >= 0."""
    return check_importance(load_json(path, "importance file"), str(path))


def check_importance(data: Mapping[str, Any], where: str = "importance") -> dict[str, float]:
    out: dict[str, float] = {}
    for name, score in data.items():
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score) or score < 0:
            raise ImportErrorDetail(f"{where}: importance[{name!r}] = {score!r}: must be a finite number >= 0")
        out[name] = float(score)
    if not out:
        raise ImportErrorDetail(f"{where}: the importance map is empty")
    return out


class _Scores:
    """Importance lookups; a key that names nothing the import knows is an error, not ignored."""

    def __init__(self, importance: Mapping[str, float] | None, known: Iterable[str]) -> None:
        self.importance = importance
        if importance is None:
            return
        known = set(known)
        unknown = sorted(k for k in importance if k not in known)
        if unknown:
            first = unknown[0]
            close = difflib.get_close_matches(first, sorted(known), n=1, cutoff=0.8)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            more = f" and {len(unknown) - 1} more" if len(unknown) > 1 else ""
            raise ImportErrorDetail(f"importance map: {len(unknown)} key(s) name no weight of this import: {first!r}{hint}{more}")

    def of(self, name: str, *fallbacks: str) -> float:
        if self.importance is None:
            return 1.0
        for key in (name, *fallbacks):
            if key in self.importance:
                return self.importance[key]
        raise ImportErrorDetail(f"importance map has no score for {name!r}")


def _rank(module: str, value: Any, out: int, inp: int) -> int:
    rank = _positive_int(value, f"{module}: rank")
    if rank > min(out, inp):
        raise ImportErrorDetail(
            f"{module}: rank {rank} is above min(out, in) = {min(out, inp)}, the largest rank of a {out} x {inp} matrix"
        )
    return rank


def _ranges(values: list[int]) -> str:
    parts, start = [], None
    for i, v in enumerate(values):
        start = v if start is None else start
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(str(start) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)


def _layer_notes(modules: Iterable[str], shapes: Shapes) -> list[str]:
    if shapes.layers is None:
        return []
    covered = {layer for m in modules if (layer := layer_of(m)) is not None}
    missing = sorted(set(range(shapes.layers)) - covered)
    if not missing or not covered:
        return []
    return [f"layers {_ranges(missing)} of {shapes.layers} have no entry: they stay as they are, outside the manifest"]


def _oversized_factors(weights: list[dict[str, Any]]) -> list[str]:
    big = [w["name"] for w in weights if w["dim"] * (w["out_features"] + w["in_features"]) > w["out_features"] * w["in_features"]]
    if not big:
        return []
    return [f"{len(big)} factor(s) hold more parameters than the dense matrix (rank > out*in/(out+in)), e.g. {big[0]}"]


def _finish(
    weights: list[dict[str, Any]],
    *,
    model: str,
    compressor: str,
    importance: Mapping[str, float] | None,
    budget: Mapping[str, Any] | None,
    target: str | None,
    workload: Mapping[str, Any] | None,
    shapes: Shapes,
    notes: list[str],
) -> Imported:
    if not weights:
        raise ImportErrorDetail("nothing to align: the input has no weight GAC can move")
    warnings: list[str] = []
    if importance is None:
        warnings.append("no importance map given: every weight scored 1.0 (uniform importance: the solver only trades parameters)")
    doc: dict[str, Any] = {
        "schema": "gac.manifest/v1",
        "model": model,
        "compressor": compressor,
        "weights": weights,
        "workload": dict(workload or {"tokens": [1024], "dtype": "float16"}),
    }
    if target:
        doc["target"] = {"platform": target}
    try:
        if budget is None:
            # GAC keeps the compressor's own parameter count (it aligns under the same budget),
            # counted as the solver counts it (solver/kinds.py: unit_params * dim).
            m = Manifest.model_validate({**doc, "budget": {"ratio": 0.0}})
            own = math.fsum(unit_params(w) * w.dim for w in m.weights)
            budget = {"params": math.floor(own)}
            notes.append(f"budget: {budget['params']:,} params, the compressor's own (unaligned) dims of the {len(weights)} weights")
        doc["budget"] = dict(budget)
        manifest = Manifest.model_validate(doc)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise ImportErrorDetail(f"manifest field {'.'.join(str(p) for p in e['loc'])}: {e['msg']}") from None
    return Imported(manifest, warnings, notes, shapes)


def _model_name(model: str | None, *configs: Mapping[str, Any] | None) -> str:
    if model:
        return model
    for cfg in configs:
        if cfg and isinstance(cfg.get("_name_or_path"), str) and cfg["_name_or_path"]:
            return cfg["_name_or_path"]
    return "unknown"


def _rank_map(config: Mapping[str, Any], key: str) -> dict[str, Any]:
    ranks = config.get(key)
    if ranks is None:
        raise ImportErrorDetail(f"config has no {key!r} map (no layers to import)")
    if not isinstance(ranks, dict) or not ranks:
        raise ImportErrorDetail(f"config's {key!r} must be a non-empty JSON object {{module: rank}}, got {ranks!r:.60}")
    return ranks


def import_asvd(
    config: Mapping[str, Any],
    *,
    model_config: Mapping[str, Any] | None = None,
    importance: Mapping[str, float] | None = None,
    budget: Mapping[str, Any] | None = None,
    model: str | None = None,
    target: str | None = None,
    workload: Mapping[str, Any] | None = None,
    compressor: str = "asvd",
) -> Imported:
    """ASVD / SVD-LLM: one low-rank weight per entry of config['truncation_ranks'].

    Shapes come from `model_config` (the original model's config.json) when given, else from `config`.
    """
    ranks = _rank_map(config, "truncation_ranks")
    shapes = Shapes.from_config(model_config if model_config is not None else config)
    scores = _Scores(importance, ranks)
    weights = []
    for module, rank in ranks.items():
        out, inp = shapes.linear(module)
        weights.append(
            {"name": module, "kind": "lowrank", "out_features": out, "in_features": inp,
             "dim": _rank(module, rank, out, inp), "importance": scores.of(module)}
        )  # fmt: skip
    notes = _layer_notes(ranks, shapes) + _oversized_factors(weights)
    return _finish(weights, model=_model_name(model, config, model_config), compressor=compressor,
                   importance=importance, budget=budget, target=target, workload=workload,
                   shapes=shapes, notes=notes)  # fmt: skip


def import_palu(
    config: Mapping[str, Any],
    *,
    model_config: Mapping[str, Any] | None = None,
    importance: Mapping[str, float] | None = None,
    budget: Mapping[str, Any] | None = None,
    model: str | None = None,
    target: str | None = None,
    workload: Mapping[str, Any] | None = None,
) -> Imported:
    """PaLU: config['head_wise_ranks'] gives one rank per head group of each K/V projection.

    Each group is its own low-rank weight (in x r_g, then r_g x out/G), named
    '<module>.g<index>'; importance may be given per group or per module.
    """
    ranks = _rank_map(config, "head_wise_ranks")
    shapes = Shapes.from_config(model_config if model_config is not None else config)
    known = set(ranks)
    for module, group_ranks in ranks.items():
        if not isinstance(group_ranks, list) or not group_ranks:
            raise ImportErrorDetail(f"{module}: a head_wise_ranks entry must be a non-empty list of ranks, got {group_ranks!r:.60}")
        known.update(f"{module}.g{g}" for g in range(len(group_ranks)))
    scores = _Scores(importance, known)
    weights = []
    for module, group_ranks in ranks.items():
        out, inp = shapes.linear(module)
        groups = len(group_ranks)
        if out % groups or (out // groups) % shapes.head_dim:
            raise ImportErrorDetail(
                f"{module}: {out} output features ({out // shapes.head_dim} heads of {shapes.head_dim}) "
                f"do not split into {groups} groups of whole heads"
            )
        for g, rank in enumerate(group_ranks):
            name = f"{module}.g{g}"
            weights.append(
                {"name": name, "kind": "lowrank", "out_features": out // groups, "in_features": inp,
                 "dim": _rank(name, rank, out // groups, inp), "importance": scores.of(name, module)}
            )  # fmt: skip
    notes = _layer_notes(ranks, shapes) + _oversized_factors(weights)
    return _finish(weights, model=_model_name(model, config, model_config), compressor="palu",
                   importance=importance, budget=budget, target=target, workload=workload,
                   shapes=shapes, notes=notes)  # fmt: skip


_MLP_PRODUCERS = {"gate_proj": True, "up_proj": True, "fc1": False}  # leaf -> gated
_MLP_CONSUMERS = ("down_proj", "fc2")
_HEAD_PROJ = ("q_proj", "k_proj", "v_proj")
_ATTN_CONSUMERS = ("o_proj", "out_proj")


def _mlp_block(module: str) -> str:
    """The MLP block a projection belongs to: 'model.layers.3.mlp.gate_proj' -> 'model.layers.3.mlp'."""
    parent = module.rsplit(".", 1)[0]
    return parent if parent.endswith(".mlp") else f"{parent}.mlp"


def import_width_map(
    widths: Mapping[str, Any],
    config: Mapping[str, Any],
    *,
    importance: Mapping[str, float] | None = None,
    budget: Mapping[str, Any] | None = None,
    model: str | None = None,
    target: str | None = None,
    workload: Mapping[str, Any] | None = None,
    compressor: str = "llm-pruner",
) -> Imported:
    """LLM-Pruner / Torch-Pruning: {module: kept width}; `config` is the original model's config.json.

    - '<layer>.mlp', '<...>.gate_proj', '<...>.up_proj' (or '.fc1'): the MLP intermediate width.
      One layer's entries are one `mlp_width` weight (gate and up multiply elementwise and
      down_proj reads their product): they must agree.
    - '<...>.q_proj' / '.k_proj' / '.v_proj': output width pruned by whole heads; it must be a
      multiple of head_dim, k and v must keep the same heads, and q's heads a multiple of theirs.
      The manifest has no head-count weight: these widths are checked and left as they are.
    - '<...>.o_proj' / '.down_proj' (and '.out_proj', '.fc2'): they consume a pruned width; their
      output is the hidden size, which width pruning does not change. Accepted only when the
      entry equals the hidden size or the width it consumes (then it adds nothing).
    """
    if not isinstance(widths, Mapping) or not widths:
        raise ImportErrorDetail("width map is empty (no layers to import)")
    shapes = Shapes.from_config(config)
    entries = _read_widths(widths, shapes)
    _check_heads(entries.attn, shapes)
    _check_consumers(entries, shapes)
    weights, averaged = _mlp_weights(entries.mlp, widths, importance, shapes)
    notes = _width_notes(widths, entries.attn, shapes, averaged)
    if not weights:
        raise ImportErrorDetail("nothing to align: the width map prunes no MLP width (attention heads stay whole and are not aligned)")
    return _finish(weights, model=_model_name(model, config), compressor=compressor,
                   importance=importance, budget=budget, target=target, workload=workload,
                   shapes=shapes, notes=notes)  # fmt: skip


@dataclass
class _WidthEntries:
    """A width map's entries by what they prune, each checked on its own."""

    mlp: dict[str, tuple[int, bool, str]] = field(default_factory=dict)  # block -> (width, gated, the entry that set it)
    attn: dict[str, dict[str, int]] = field(default_factory=dict)  # attention parent -> {leaf: width}
    consumers: list[tuple[str, int]] = field(default_factory=list)  # (entry, width): projections that read a pruned width


def _read_widths(widths: Mapping[str, Any], shapes: Shapes) -> _WidthEntries:
    """File each entry by its leaf (MLP width, attention heads, consumer), in the map's order; an unknown one raises."""
    out = _WidthEntries()
    for module, value in widths.items():
        leaf = module.rsplit(".", 1)[-1]
        if leaf == "mlp" or leaf in _MLP_PRODUCERS:
            _add_mlp_width(out.mlp, module, leaf, value, shapes)
        elif leaf in _HEAD_PROJ:
            width = _head_width(module, value, shapes)
            out.attn.setdefault(module.rsplit(".", 1)[0], {})[leaf] = width
        elif leaf in _MLP_CONSUMERS or leaf in _ATTN_CONSUMERS:
            shapes.linear(module)
            out.consumers.append((module, _positive_int(value, f"{module}: width")))
        else:
            shapes.linear(module)  # raises: unknown projection
    return out


def _add_mlp_width(mlp: dict[str, tuple[int, bool, str]], module: str, leaf: str, value: Any, shapes: Shapes) -> None:
    """An MLP's intermediate width, from its '.mlp' entry or one of its producers; one MLP keeps one width."""
    if leaf == "mlp":
        block, gated, full = module, True, shapes.intermediate
    else:
        block, gated, full = _mlp_block(module), _MLP_PRODUCERS[leaf], shapes.linear(module)[0]
    shapes.check_layer(module)
    width = _positive_int(value, f"{module}: width")
    if width > full:
        raise ImportErrorDetail(f"{module}: width {width} is above the original intermediate size {full}")
    if block in mlp and mlp[block][0] != width:
        raise ImportErrorDetail(
            f"{module}: width {width} differs from {mlp[block][2]}'s {mlp[block][0]}: gate and up projections "
            f"of one MLP multiply elementwise, so they must keep one width"
        )
    mlp.setdefault(block, (width, gated, module))


def _head_width(module: str, value: Any, shapes: Shapes) -> int:
    """A q/k/v projection's output width: at most the original, in whole heads."""
    out, _ = shapes.linear(module)
    width = _positive_int(value, f"{module}: width")
    if width > out:
        raise ImportErrorDetail(f"{module}: width {width} is above its original {out} output features")
    if width % shapes.head_dim:
        raise ImportErrorDetail(
            f"{module}: width {width} is not a whole number of heads (head_dim {shapes.head_dim}): "
            f"attention is pruned by heads, so give a multiple of {shapes.head_dim}"
        )
    return width


def _check_heads(attn: dict[str, dict[str, int]], shapes: Shapes) -> None:
    """Per attention: k and v keep the same heads, and q a multiple of them (grouped-query attention)."""
    for parent, got in attn.items():
        k, v, q = got.get("k_proj"), got.get("v_proj"), got.get("q_proj")
        if k is not None and v is not None and k != v:
            raise ImportErrorDetail(
                f"{parent}: k_proj keeps {k // shapes.head_dim} heads but v_proj {v // shapes.head_dim}: each key/value head has both"
            )
        kv = k if k is not None else v
        if q is not None and kv is not None and (q // shapes.head_dim) % (kv // shapes.head_dim):
            raise ImportErrorDetail(
                f"{parent}: q_proj keeps {q // shapes.head_dim} heads, not a multiple of the {kv // shapes.head_dim} key/value heads kept"
            )


def _check_consumers(entries: _WidthEntries, shapes: Shapes) -> None:
    """A consumer's entry must be the hidden size or the width it reads: its own width is not pruned."""
    for module, width in entries.consumers:
        leaf = module.rsplit(".", 1)[-1]
        if leaf in _MLP_CONSUMERS:
            producer = entries.mlp.get(_mlp_block(module))
            feeds, what = (producer[0] if producer else None), "the MLP width"
        else:
            feeds, what = entries.attn.get(module.rsplit(".", 1)[0], {}).get("q_proj"), "q_proj's heads"
        if width != shapes.hidden and width != feeds:
            raise ImportErrorDetail(
                f"{module}: width {width}: its output is the hidden size {shapes.hidden}, which width pruning does not "
                f"change, and its input follows {what}; give the pruned width on "
                f"{'gate_proj/up_proj' if leaf in _MLP_CONSUMERS else 'q_proj/k_proj/v_proj'}"
            )


def _mlp_weights(
    mlp: dict[str, tuple[int, bool, str]], widths: Mapping[str, Any], importance: Mapping[str, float] | None, shapes: Shapes
) -> tuple[list[dict[str, Any]], bool]:
    """One `mlp_width` weight per MLP block, and whether a block's score is the mean of its projections' scores."""
    known = set(widths) | set(mlp)
    for block in mlp:
        known.update(f"{block}.{leaf}" for leaf in ("gate_proj", "up_proj", "down_proj"))
    scores = _Scores(importance, known)
    weights = []
    averaged = False
    for block, (width, gated, _) in mlp.items():
        members = [f"{block}.{leaf}" for leaf in ("gate_proj", "up_proj", "down_proj")]
        if importance is not None and block not in importance and (given := [importance[m] for m in members if m in importance]):
            score, averaged = math.fsum(given) / len(given), True
        else:
            score = scores.of(block)
        weights.append({"name": block, "kind": "mlp_width", "hidden": shapes.hidden, "full": shapes.intermediate,
                        "gated": gated, "dim": width, "importance": score})  # fmt: skip
    return weights, averaged


def _width_notes(widths: Mapping[str, Any], attn: dict[str, dict[str, int]], shapes: Shapes, averaged: bool) -> list[str]:
    """What the manifest leaves out (layers without entries, attention heads) and how scores were read."""
    notes = _layer_notes(widths, shapes)
    if attn:
        pruned = [p for p, got in attn.items() if got.get("q_proj", shapes.heads * shapes.head_dim) < shapes.heads * shapes.head_dim
                  or min(got.get("k_proj", 1 << 30), got.get("v_proj", 1 << 30)) < shapes.kv_heads * shapes.head_dim]  # fmt: skip
        notes.append(
            f"attention of {len(attn)} layer(s) ({len(pruned)} pruned) kept as whole heads of {shapes.head_dim}: "
            f"gac.manifest/v1 has no head-count weight, so those widths stay as they are, outside the manifest and its budget"
        )
    if any(m.rsplit(".", 1)[-1] == "mlp" for m in widths):
        notes.append("'<layer>.mlp' entries are gated MLPs (gate, up and down projections, as in Llama)")
    if averaged:
        notes.append("MLP blocks without a '<layer>.mlp' score take the mean of their projections' scores")
    return notes
