"""The faces the command line serves beside the backoffice: the Python API agents import (api), the
MCP server (mcp_server), the operator's editor session (edit) and what `db status` reports (status)."""
