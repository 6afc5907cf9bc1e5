"""The sans-IO wire pieces shared by every transport: line splitting and the
JSON-RPC lines a server writes."""
