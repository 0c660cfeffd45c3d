"""JSON Schemas of the checkpoint's JSON files, checked before any field is used.

A checkpoint is untrusted input (copied between clusters, edited by hand after an incident); the
sha256 manifest only says the files are the ones meta.json names. Every structural defect (``COMPLETE``
holding ``[]``, a shard without ``rank``, an RNG state of the wrong length) becomes one line naming the
checkpoint, the file and the JSON path, instead of a ``KeyError`` deep in the loader.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from verl.config.safe_yaml import short

_U32 = {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
_NUM = {"type": "number"}
_B64 = {"type": "string", "pattern": r"^[A-Za-z0-9+/]*={0,2}$", "maxLength": 1 << 20}
# a path relative to the checkpoint directory: no absolute paths, no "..", no empty segments
_REL_PATH = {"description": "a path inside the checkpoint directory (no '..', not absolute)",
             "type": "string", "pattern": r"^(?!.*(^|/)\.\.(/|$))[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$",
             "maxLength": 512}

COMPLETE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["global_step", "meta_sha256"],
    "properties": {
        "global_step": {"type": "integer", "minimum": 0},
        "meta_sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "64 lowercase hex digits"},
    },
}

RNG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["python", "numpy", "torch"],
    "properties": {
        # random.getstate(): (version 3, 624 MT words + position, gauss_next)
        "python": {"type": "array", "prefixItems": [
            {"const": 3}, {"type": "array", "items": _U32, "minItems": 625, "maxItems": 625},
            {"anyOf": [{"type": "null"}, _NUM]}], "minItems": 3, "maxItems": 3},
        # np.random.get_state(): (kind, 624 keys, pos, has_gauss, cached_gaussian)
        "numpy": {"type": "array", "prefixItems": [
            {"const": "MT19937"}, {"type": "array", "items": _U32, "minItems": 624, "maxItems": 624},
            {"type": "integer", "minimum": 0, "maximum": 624}, {"enum": [0, 1]}, _NUM],
            "minItems": 5, "maxItems": 5},
        "torch": _B64,
        "cuda": {"type": "array", "items": _B64},
    },
}

_SHARD = {
    "type": "object",
    "required": ["file", "rows", "bytes", "t_min", "t_max", "rank"],
    "properties": {
        "file": {"type": "string", "pattern": r"^rank\d+-\d+\.arrow$", "description": "a file name rank<R>-<K>.arrow"},
        "rows": {"type": "integer", "minimum": 0},
        "bytes": {"type": "integer", "minimum": 0},
        "t_min": {"anyOf": [{"type": "null"}, _NUM]},
        "t_max": {"anyOf": [{"type": "null"}, _NUM]},
        "rank": {"type": "integer", "minimum": 0},
    },
}

META_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["format_version", "global_step", "world_size", "parts", "rng", "manifest"],
    "properties": {
        "format_version": {"type": "integer"},
        "global_step": {"type": "integer", "minimum": 0},
        "created_at": {"anyOf": [{"type": "null"}, _NUM]},
        "world_size": {"type": "integer", "minimum": 1},
        "run_id": {"type": "string", "pattern": "^[0-9a-f]{32}$"},
        "strategy": {"anyOf": [{"type": "null"}, {"enum": ["ddp", "fsdp"]}]},
        "parts": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["version", "path"],
                "properties": {"version": {"type": "string"}, "path": _REL_PATH,
                               "role": {"enum": ["model", "optimizer"]},
                               "shards": {"type": "array", "items": _SHARD}},
            },
        },
        "rng": {"type": "array", "items": RNG_SCHEMA},
        "manifest": {
            "type": "object",
            "propertyNames": _REL_PATH,
            "additionalProperties": {
                "type": "object",
                "required": ["sha256", "bytes"],
                "properties": {"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$",
                                          "description": "64 lowercase hex digits"},
                               "bytes": {"type": "integer", "minimum": 0}},
            },
        },
        "kl_controller": {"type": "object", "properties": {"value": {"anyOf": [{"type": "null"}, _NUM]}}},
        "lr_scheduler": {"anyOf": [{"type": "null"}, {"type": "object"}]},
        "model_config_hash": {"anyOf": [{"type": "null"}, {"type": "string"}]},
        "extra": {"type": "object"},
    },
}

_VALIDATORS = {id(s): Draft202012Validator(s) for s in (COMPLETE_SCHEMA, META_SCHEMA, RNG_SCHEMA)}


def shape_error(doc: Any, schema: dict[str, Any]) -> str | None:
    """``None`` when ``doc`` fits ``schema``, else ``"<json path>: <what is wrong>"`` in one short line."""
    err = best_match(_VALIDATORS[id(schema)].iter_errors(doc))
    if err is None:
        return None
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.absolute_path).lstrip(".") or "top level"
    expected = err.validator_value
    if err.validator in ("required",):
        missing = [k for k in expected if not (isinstance(err.instance, dict) and k in err.instance)]
        return f"{where}: missing key {missing[0]!r}" if missing else f"{where}: missing key"
    if isinstance(err.schema, dict) and "description" in err.schema:
        return f"{where}: expected {err.schema['description']}, got {short(err.instance)}"
    if err.validator in ("type", "enum", "const", "minimum", "maximum", "pattern", "minItems", "maxItems", "maxLength"):
        return f"{where}: expected {err.validator} {short(expected, 60)}, got {short(err.instance)}"
    return f"{where}: {err.validator} check failed on {short(err.instance)}"
