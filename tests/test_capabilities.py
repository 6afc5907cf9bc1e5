"""``ToolCapabilities``, its closed enums, and the effective-limit helpers."""

from __future__ import annotations

import pytest

import kigi_tool_protocol as kp
from kigi_tool_protocol._capabilities import (
    HookKind,
    effective_max_frame_bytes,
    effective_timeout_ms,
)
from kigi_tool_protocol._limits import DEFAULT_TIMEOUT_MS, MAX_FRAME_BYTES_CEILING, U32_MAX, U64_MAX


def test_default_writes_both_flags_and_nothing_else() -> None:
    """The default capabilities write the two flags as false and omit everything else."""
    caps = kp.ToolCapabilities()
    assert kp.json_codec.encode(caps) == b'{"supports_cancel":false,"is_read_only":false}'
    assert kp.json_codec.decode(b"{}", kp.ToolCapabilities) == caps


def test_absent_optionals_read_as_none() -> None:
    """Absent or null optional fields read as None; an absent hooks list reads as []."""
    caps = kp.json_codec.decode(b'{"streaming":null,"timeout_ms":null}', kp.ToolCapabilities)
    assert caps.streaming is None
    assert caps.timeout_ms is None
    assert caps.tool_scope is None
    assert caps.hooks == []


def test_flags_are_written_when_true_and_false() -> None:
    """supports_cancel and is_read_only are always written, whatever their value."""
    caps = kp.ToolCapabilities(supports_cancel=True, hooks=[HookKind.ON_CANCEL])
    assert kp.json_codec.encode(caps) == (
        b'{"supports_cancel":true,"is_read_only":false,"hooks":["on_cancel"]}'
    )


@pytest.mark.parametrize(
    ("frame", "reason", "path"),
    [
        ('{"supports_cancel":null}', "Expected `bool`, got `null`", "$.supports_cancel"),
        ('{"is_read_only":"true"}', "Expected `bool`, got `str`", "$.is_read_only"),
        ('{"hooks":null}', "Expected `array`, got `null`", "$.hooks"),
        ('{"hooks":["on_start"]}', "Invalid enum value 'on_start'", "$.hooks[0]"),
        ('{"hooks":["On_Cancel"]}', "Invalid enum value 'On_Cancel'", "$.hooks[0]"),
        ('{"tool_scope":"Write"}', "Invalid enum value 'Write'", "$.tool_scope"),
        ('{"max_concurrency":-1}', "Expected `int` >= 0", "$.max_concurrency"),
        (
            f'{{"max_frame_bytes":{U32_MAX + 1}}}',
            f"Expected `int` <= {U32_MAX}",
            "$.max_frame_bytes",
        ),
        (f'{{"timeout_ms":{U64_MAX + 1}}}', "`timeout_ms` = 18446744073709551616 is outside", "$"),
        ('{"timeout_ms":1.5}', "Expected `int | null`, got `float`", "$.timeout_ms"),
        ('{"streaming":{}}', "Object missing required field `subkind`", "$.streaming"),
    ],
    ids=[
        "null-flag",
        "string-flag",
        "null-hooks",
        "unknown-hook",
        "hook-case",
        "scope-case",
        "negative-u32",
        "past-u32",
        "past-u64",
        "float-u64",
        "spec-without-subkind",
    ],
)
def test_bad_capabilities_are_rejected(frame: str, reason: str, path: str) -> None:
    """Wrong types, unknown enum values and out-of-range numbers are DecodeErrors."""
    with pytest.raises(kp.DecodeError) as info:
        kp.json_codec.decode(frame, kp.ToolCapabilities)
    assert reason in info.value.reason
    assert info.value.path == path


@pytest.mark.parametrize("timeout_ms", [-1, U64_MAX + 1])
def test_timeout_outside_u64_is_refused_on_construction(timeout_ms: int) -> None:
    """A constructed ToolCapabilities checks ``timeout_ms`` like the decoder does."""
    with pytest.raises(ValueError, match=f"`timeout_ms` = {timeout_ms} is outside the u64 range"):
        kp.ToolCapabilities(timeout_ms=timeout_ms)
    assert kp.ToolCapabilities(timeout_ms=U64_MAX).timeout_ms == U64_MAX


def test_enums_are_their_wire_strings() -> None:
    """HookKind and ToolScope members equal, and encode as, their snake_case strings."""
    assert [kind.value for kind in HookKind] == [
        "on_session_open",
        "on_session_close",
        "on_tool_call_start",
        "on_tool_call_result",
        "on_cancel",
        "on_notification",
    ]
    assert [scope.value for scope in kp.ToolScope] == ["read", "write"]
    assert kp.json_codec.encode(kp.ToolScope.WRITE) == b'"write"'
    assert kp.json_codec.decode(b'"on_cancel"', HookKind) is HookKind.ON_CANCEL


@pytest.mark.parametrize(
    ("declared", "effective"),
    [
        (None, MAX_FRAME_BYTES_CEILING),
        (4096, 4096),
        (MAX_FRAME_BYTES_CEILING, MAX_FRAME_BYTES_CEILING),
        (MAX_FRAME_BYTES_CEILING + 1, MAX_FRAME_BYTES_CEILING),
        (U32_MAX, MAX_FRAME_BYTES_CEILING),
    ],
)
def test_effective_max_frame_bytes_is_clamped_to_the_ceiling(
    declared: int | None, effective: int
) -> None:
    """The frame limit is the declared one, never above the 16 MiB ceiling."""
    caps = kp.ToolCapabilities(max_frame_bytes=declared)
    assert effective_max_frame_bytes(caps) == effective


def test_effective_limits_without_capabilities() -> None:
    """With no capabilities at all, the ceiling and the default timeout apply."""
    assert effective_max_frame_bytes(None) == MAX_FRAME_BYTES_CEILING == 16 * 1024 * 1024
    assert effective_timeout_ms(None) == DEFAULT_TIMEOUT_MS == 60_000


@pytest.mark.parametrize(("declared", "effective"), [(None, 60_000), (1, 1), (U64_MAX, U64_MAX)])
def test_effective_timeout_ms(declared: int | None, effective: int) -> None:
    """The timeout is the declared one, or 60000 ms when undeclared."""
    assert effective_timeout_ms(kp.ToolCapabilities(timeout_ms=declared)) == effective
