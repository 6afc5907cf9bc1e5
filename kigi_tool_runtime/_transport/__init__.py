"""The stdio transport: the sans-IO JSON-RPC server and client cores and their
asyncio drivers."""
