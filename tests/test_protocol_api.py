"""The public surface of ``kigi_tool_protocol``: ``__all__``, struct configs, errors."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, get_args

import msgspec
import pytest

import kigi_tool_protocol as kp
from kigi_tool_protocol import _content as content
from kigi_tool_protocol import _hooks as hooks
from kigi_tool_protocol._errors import FrameTooLargeError
from kigi_tool_protocol._limits import I32_MAX, I32_MIN, I64_MAX, I64_MIN, U32_MAX, U64_MAX
from kigi_tool_protocol._progress import ContentProgress
from kigi_tool_protocol._tool_call import ToolOutputJson, ToolOutputMcp, ToolOutputText

#: The class of each error code, in the order ``ToolErrorWire`` lists them,
#: and the code each is tagged with.
ERROR_WIRES: tuple[type[msgspec.Struct], ...] = get_args(kp.ToolErrorWire)
ERROR_WIRE_CODES = (
    "tool_not_found",
    "session_mismatch",
    "forbidden",
    "connection_lost",
    "timeout",
    "cancelled",
    "invalid_params",
    "execution",
    "unsupported_protocol_version",
    "frame_too_large",
    "behavior_version_unsupported",
    "render_limited",
    "terminal_error",
    "internal_error",
    "custom",
)

#: (omit_defaults, tag_field, tag) of every public wire class. All are frozen and
#: kw_only; only PartialResultPayload forbids unknown fields.
STRUCT_CONFIGS: dict[type[msgspec.Struct], tuple[bool, str | None, str | None]] = {
    kp.StreamingSpec: (True, None, None),
    kp.PartialResultPayload: (False, None, None),
    kp.ToolCapabilities: (True, None, None),
    kp.TextProgress: (False, "kind", "text"),
    ContentProgress: (False, "kind", "content"),
    kp.CustomProgress: (False, "kind", "custom"),
    content.TextBlock: (False, "type", "text"),
    content.ImageBlock: (True, "type", "image"),
    content.ResourceBlock: (True, "type", "resource"),
    content.McpTextBlock: (False, "type", "text"),
    content.McpImageBlock: (False, "type", "image"),
    content.McpResourceBlock: (True, "type", "resource"),
    content.McpContent: (False, None, None),
    kp.ToolCallParams: (True, None, None),
    ToolOutputText: (False, "kind", "text"),
    ToolOutputJson: (False, "kind", "json"),
    ToolOutputMcp: (False, "kind", "mcp"),
    kp.ToolCallResult: (True, None, None),
    kp.ToolCallProgressFrame: (True, None, None),
    **{cls: (True, "code", code) for cls, code in zip(ERROR_WIRES, ERROR_WIRE_CODES, strict=True)},
    hooks.HookCancel: (False, "type", "Cancel"),
    hooks.HookPause: (False, "type", "Pause"),
    hooks.HookResume: (False, "type", "Resume"),
    hooks.HookSessionEnded: (False, "type", "SessionEnded"),
    hooks.HookCustom: (False, "type", "Custom"),
    hooks.HookFrame: (True, None, None),
    hooks.HookReplyParams: (False, None, None),
    kp.JsonRpcError: (True, None, None),
    kp.JsonRpcRequest: (True, "jsonrpc", "2.0"),
    kp.JsonRpcNotification: (True, "jsonrpc", "2.0"),
    kp.JsonRpcResponse: (True, "jsonrpc", "2.0"),
}


#: Struct classes of the private modules that are no wire type of their own: the
#: base every wire type shares, and a decoding aid of the envelope.
NOT_WIRE_TYPES = {"WireStruct", "Unversioned"}


def _public_structs() -> set[type[msgspec.Struct]]:
    return {
        value
        for value in (getattr(kp, name) for name in kp.__all__)
        if isinstance(value, type) and issubclass(value, msgspec.Struct)
    }


def _wire_structs() -> set[type[msgspec.Struct]]:
    """Every wire class the protocol's modules define, exported or not."""
    found = set()
    for info in pkgutil.iter_modules(kp.__path__):
        module = importlib.import_module(f"kigi_tool_protocol.{info.name}")
        for name, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, msgspec.Struct)
                and value.__module__ == module.__name__
                and not name.startswith("_")
                and name not in NOT_WIRE_TYPES
            ):
                found.add(value)
    return found


def test_every_wire_struct_has_a_pinned_config() -> None:
    """The table below covers exactly the wire classes, the exported ones and
    those only this package's modules import (hooks, content blocks, one class
    per error code)."""
    assert _public_structs() <= _wire_structs()
    assert _wire_structs() == set(STRUCT_CONFIGS)


@pytest.mark.parametrize("cls", list(STRUCT_CONFIGS), ids=lambda cls: cls.__name__)
def test_struct_config(cls: type[msgspec.Struct]) -> None:
    """Each wire class is frozen and kw_only, and states its own strictness and tag."""
    config = cls.__struct_config__
    assert config.frozen
    # StructConfig has no kw_only flag: the constructor's signature shows it.
    parameters = inspect.signature(cls).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    assert config.forbid_unknown_fields is (cls is kp.PartialResultPayload)
    assert not config.array_like
    assert (config.omit_defaults, config.tag_field, config.tag) == STRUCT_CONFIGS[cls]


def test_all_is_complete_and_leaks_nothing() -> None:
    """__all__ names every public attribute, each exists, and none repeats."""
    public = {name for name in dir(kp) if not name.startswith("_")}
    assert public == set(kp.__all__)
    assert len(kp.__all__) == len(set(kp.__all__))
    assert isinstance(kp.__all__, tuple)


def test_all_exports_only_this_package() -> None:
    """Every exported class and function is defined in kigi_tool_protocol."""
    for name in kp.__all__:
        value: Any = getattr(kp, name)
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__module__.startswith("kigi_tool_protocol."), name


def test_private_modules_export_through_the_package() -> None:
    """Each private module's __all__ is re-exported, bar the internal helpers."""
    internal = {"I32", "I64", "U32", "U64", "WireStruct", "always_false", "check_u64"}
    internal |= {"ENVELOPE_TYPES", "DISTRIBUTION", "installed_version"}
    for info in pkgutil.iter_modules(kp.__path__):
        module = importlib.import_module(f"kigi_tool_protocol.{info.name}")
        for name in getattr(module, "__all__", ()):
            assert name in kp.__all__ or name in internal, f"{info.name}.{name}"


def test_error_tree() -> None:
    """Every error is a WireError (a ValueError); frame-size errors are decode errors."""
    assert issubclass(kp.WireError, ValueError)
    assert issubclass(kp.DecodeError, kp.WireError)
    assert issubclass(FrameTooLargeError, kp.DecodeError)
    assert issubclass(kp.IdentifierError, kp.WireError)


def test_decode_error_message_names_the_path() -> None:
    """DecodeError keeps reason and path, and its message names the path unless it is the root."""
    error = kp.DecodeError("Expected `int`", "$.params.seq")
    assert (error.reason, error.path) == ("Expected `int`", "$.params.seq")
    assert str(error) == "Expected `int` at `$.params.seq`"
    assert str(kp.DecodeError("bad")) == "bad"


def test_integer_bounds_are_the_rust_ranges() -> None:
    """The exported wire bounds are the ranges of Rust's u32, u64, i32 and i64."""
    assert (U32_MAX, U64_MAX) == (2**32 - 1, 2**64 - 1)
    assert (I32_MIN, I32_MAX) == (-(2**31), 2**31 - 1)
    assert (I64_MIN, I64_MAX) == (-(2**63), 2**63 - 1)
