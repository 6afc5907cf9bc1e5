"""A scripted pydantic-ai model for tests: pydantic-ai's own ``FunctionModel``
playing a list of turns (tool calls, or a final text), streamed or not, and
keeping what each request sent it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from kigi_tool_protocol import PartialResultPayload, ToolCallProgressFrame, json_codec


@dataclass(frozen=True)
class Call:
    """One tool call the model makes: the tool's name, its arguments (a dict, or
    raw JSON text), the call's id."""

    name: str
    args: dict[str, Any] | str
    id: str

    def json_args(self) -> str:
        return self.args if isinstance(self.args, str) else json.dumps(self.args)


#: A turn: the calls of one response, or its final text (None: the text the
#: model was last sent, as "saw: ...").
Turn = Sequence[Call] | str | None


class Script:
    """Play ``turns``, one per model request; past the last, answer with what
    the last request sent. ``requests`` keeps the parts of every request, and
    ``tools`` the tool definitions the model was offered."""

    def __init__(self, *turns: Turn) -> None:
        self.turns = list(turns)
        self.requests: list[list[Any]] = []
        self.tools: list[Any] = []

    def model(self) -> FunctionModel:
        return FunctionModel(self._respond, stream_function=self._stream)

    def returns(self) -> list[ToolReturnPart]:
        """Every tool return the model was sent, in order."""
        return [
            part for parts in self.requests for part in parts if isinstance(part, ToolReturnPart)
        ]

    def _turn(self, messages: list[ModelMessage], info: AgentInfo) -> Turn:
        last = messages[-1]
        self.requests.append(list(last.parts) if isinstance(last, ModelRequest) else [])
        self.tools = list(info.function_tools)
        turn = self.turns.pop(0) if self.turns else None
        if turn is None:
            sent = [str(getattr(part, "content", "")) for part in self.requests[-1]]
            return "saw: " + " | ".join(sent)
        return turn

    def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = self._turn(messages, info)
        if isinstance(turn, str):
            return ModelResponse(parts=[TextPart(turn)])
        assert turn is not None
        return ModelResponse(
            parts=[ToolCallPart(call.name, call.args, tool_call_id=call.id) for call in turn]
        )

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        turn = self._turn(messages, info)
        if isinstance(turn, str):
            yield turn
            return
        assert turn is not None
        yield {
            index: DeltaToolCall(call.name, call.json_args(), tool_call_id=call.id)
            for index, call in enumerate(turn)
        }


def kigi_frame(frame: Any) -> ToolCallProgressFrame[PartialResultPayload]:
    """An event's frame (JSON values) decoded strictly as the kigi frame it is."""
    return json_codec.decode(
        msgspec.json.encode(frame), ToolCallProgressFrame[PartialResultPayload]
    )
