"""The stdio transport: JSON lines, the JSON-RPC server and client."""
