"""The kigi tool runtime: stream tool output as capped, UTF-8-complete deltas,
and reassemble it knowing exactly what was lost."""

__all__: tuple[str, ...] = ()
