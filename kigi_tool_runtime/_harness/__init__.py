"""The harness pieces (sans-IO), built on the consumer core: the tool-call
monitor that turns a connection's traffic into renderer-agnostic events, and
the repair of a conversation history after a failed turn."""
