"""A tool's input and output schemas as hosts state them: an ``object`` schema
at the root (sans-IO).

msgspec writes a Struct's JSON Schema as a root ``$ref`` into ``$defs``; MCP
wants an ``object`` at the root of ``inputSchema``, and model APIs want one as
a function's parameters. Every host takes its schemas from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Plumbing for the hosts, not exported: the package exports nothing of it.
__all__: tuple[str, ...] = ()


def root_object_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` with a root ``$ref`` into ``$defs`` inlined, as hosts want an
    ``object`` schema at the root (msgspec writes a Struct as a reference). The
    other definitions stay, so nested references still resolve.

    Raises:
        ValueError: the root reference does not resolve, or the root is not an
            ``object`` schema.
    """
    out = dict(schema)
    ref = out.get("$ref")
    if isinstance(ref, str):
        prefix = "#/$defs/"
        defs = dict(out.get("$defs") or {})
        name = ref[len(prefix) :] if ref.startswith(prefix) else None
        if name is None or name not in defs:
            raise ValueError(f"the schema's root reference {ref!r} does not resolve")
        root = dict(defs.pop(name))
        del out["$ref"]
        out.pop("$defs", None)
        if _references(defs, ref) or _references(root, ref):
            defs[name] = root  # recursive: keep the definition it refers to
        out = {**root, **out}
        if defs:
            out["$defs"] = defs
    if out.get("type") != "object":
        kind = out.get("type")
        raise ValueError(f"a tool schema must be an object at the root, got {kind!r}")
    return out


def _references(value: Any, ref: str) -> bool:
    if isinstance(value, dict):
        return value.get("$ref") == ref or any(_references(v, ref) for v in value.values())
    if isinstance(value, list):
        return any(_references(v, ref) for v in value)
    return False
