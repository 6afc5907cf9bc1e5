"""The events a kigi call emits into a pydantic-ai run: one ``kigi.tool_output``
per frame, then one ``kigi.tool_output_end``.

Invariants:

Rule 1. One :class:`KigiToolOutput` per frame the tool streams, emitted as the
        frame is produced, in order, numbered by ``seq`` from 0 per call. It
        carries the exact kigi frame (``tool_call_id``, ``kind``, the
        ``PartialResultPayload`` body, ``dropped_count``) as JSON values, so a
        consumer reassembles the output byte-exact with a ``Reassembler``.
Rule 2. Its ``text`` is what a consumer that knows nothing of kigi appends: the
        frame's delta, preceded by a loss marker on a line of its own where
        bytes were lost. Concatenated, the texts are the output exactly when
        nothing was lost, and every loss shows in them.
Rule 3. The payload the UI adapters forward (AG-UI ``CUSTOM`` ``value``, Vercel
        AI ``data-kigi.tool_output`` ``data``) is the event's fields plus the
        pydantic-ai ``tool_call_id`` and ``tool_name``, so a frontend with
        several calls in flight tells their outputs apart.
Rule 4. After the last frame, one :class:`KigiToolOutputEnd`: its ``closing``
        is what a text-only consumer appends last (the truncation marker, bytes
        never delivered; ``""`` when there is nothing to say), with whether the
        call succeeded and its loss report as JSON values.
Rule 5. Through a call's silence, one :class:`KigiToolHeartbeat` each
        heartbeat interval: how long the call has run and been silent, and
        ``text`` saying so for a person (never output: a consumer that appends
        ``kigi.tool_output`` texts does not take it).

The fields are JSON values only: pydantic-ai builds a schema for every
registered event class, and the UI adapters serialize the payload as is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from pydantic_ai import CustomEvent

from kigi_tool_protocol import WireError

from .._call._heartbeat import Beat
from .._call._live import LiveDelta
from .._call._live import frame_json as _frame_json
from .._call._outcome import CallEnd

__all__ = ("KigiToolHeartbeat", "KigiToolOutput", "KigiToolOutputEnd")

#: The name a frame's event is registered and forwarded under.
OUTPUT_EVENT: Final = "kigi.tool_output"
#: The name of the event that closes a call's output.
OUTPUT_END_EVENT: Final = "kigi.tool_output_end"
#: The name of the event a silent call sends each heartbeat interval.
HEARTBEAT_EVENT: Final = "kigi.tool_heartbeat"


def frame_json(delta: LiveDelta) -> dict[str, Any]:
    """The delta's kigi frame as JSON values, as the kigi JSON codec writes it.

    Raises:
        WireError: the frame holds a value JSON cannot carry.
    """
    try:
        return _frame_json(delta.frame)
    except WireError as exc:
        raise WireError(f"cannot encode the frame of seq {delta.seq}: {exc}") from exc


def _attributed(event: CustomEvent, payload: dict[str, Any]) -> dict[str, Any]:
    return {"tool_call_id": event.tool_call_id, "tool_name": event.tool_name, **payload}


@dataclass(repr=False, kw_only=True)
class KigiToolOutput(CustomEvent, name=OUTPUT_EVENT):
    """One frame of a kigi call's output (Rules 1-3).

    ``seq`` is the frame's number in the call (from 0); ``text`` what a
    text-only consumer appends (marker line, if any, then the delta);
    ``frame`` the exact kigi frame as JSON values. ``tool_call_id`` and
    ``tool_name`` are the pydantic-ai call's, stamped when it is emitted.
    """

    seq: int
    text: str
    frame: dict[str, Any]

    @classmethod
    def of(cls, delta: LiveDelta) -> KigiToolOutput:
        """The event of one served frame.

        Raises:
            WireError: the frame holds a value JSON cannot carry.
        """
        return cls(seq=delta.seq, text=delta.text, frame=frame_json(delta))

    @property
    def delta(self) -> str:
        """The frame's delta text alone (``""`` when it has none)."""
        body = self.frame.get("body")
        delta = body.get("delta") if isinstance(body, dict) else None
        return delta if isinstance(delta, str) else ""

    def to_payload(self) -> dict[str, Any]:
        """What the UI adapters forward (Rule 3)."""
        return _attributed(self, {"seq": self.seq, "text": self.text, "frame": self.frame})


@dataclass(repr=False, kw_only=True)
class KigiToolOutputEnd(CustomEvent, name=OUTPUT_END_EVENT):
    """The end of a kigi call's output (Rule 4).

    ``closing`` is the text a text-only consumer appends after the last
    ``kigi.tool_output`` (``""`` when none); ``ok`` whether the call returned
    a result (not an error); ``frames`` how many frames it streamed;
    ``complete`` whether nothing of the output was lost; ``loss`` the loss
    report as JSON values.
    """

    closing: str
    ok: bool
    frames: int
    complete: bool
    loss: dict[str, Any]

    @classmethod
    def of(cls, end: CallEnd) -> KigiToolOutputEnd:
        """The event that closes a served call's output."""
        return cls(
            closing=end.closing,
            ok=end.ok,
            frames=end.frames,
            complete=end.complete,
            loss=end.loss_json(),
        )

    def to_payload(self) -> dict[str, Any]:
        """What the UI adapters forward (Rule 3)."""
        return _attributed(
            self,
            {
                "closing": self.closing,
                "ok": self.ok,
                "frames": self.frames,
                "complete": self.complete,
                "loss": self.loss,
            },
        )


@dataclass(repr=False, kw_only=True)
class KigiToolHeartbeat(CustomEvent, name=HEARTBEAT_EVENT):
    """A kigi call is alive though silent (Rule 5): it has run ``elapsed_s``
    seconds and written nothing for ``silent_s``; ``text`` says so
    (``running 6m 12s, no output for 45 s``)."""

    elapsed_s: float
    silent_s: float
    text: str

    @classmethod
    def of(cls, beat: Beat) -> KigiToolHeartbeat:
        """The event of one heartbeat."""
        return cls(
            elapsed_s=round(beat.elapsed_s, 3), silent_s=round(beat.silent_s, 3), text=beat.text()
        )

    def to_payload(self) -> dict[str, Any]:
        """What the UI adapters forward (Rule 3)."""
        return _attributed(
            self, {"elapsed_s": self.elapsed_s, "silent_s": self.silent_s, "text": self.text}
        )
