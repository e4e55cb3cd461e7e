"""An MCP client the project did not write: the official Python `mcp` package.

Starts `orchestrator mcp --workspace DIR` over stdio, lists the tools, calls read_file and
grep_files, and prints one JSON object with what it saw. tools_cli.rs runs it and checks the output.
Usage: python3 mcp_client.py ORCHESTRATOR_BIN WORKSPACE HOME
"""

import asyncio
import json
import sys

try:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
except ImportError as e:  # A missing prerequisite must fail loudly, never skip.
    print(f"the Python package 'mcp' is required (pip install mcp): {e}", file=sys.stderr)
    sys.exit(3)


def attr(obj, snake, camel):
    """Reads a field under its snake_case name (mcp 2.x) or camelCase name (mcp 1.x)."""
    return getattr(obj, snake) if hasattr(obj, snake) else getattr(obj, camel)


def texts(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


async def main(binary, workspace, home):
    params = StdioServerParameters(
        command=binary,
        args=["mcp", "--workspace", workspace],
        env={"ORCHESTRATOR_HOME": home, "PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = await session.list_tools()
            read_file = await session.call_tool("read_file", {"path": "hello.txt"})
            grep = await session.call_tool("grep_files", {"pattern": "needle", "mode": "content"})
            missing = await session.call_tool("read_file", {"path": "missing.txt"})
            print(json.dumps({
                "tools": {t.name: {"description": t.description, "schema": attr(t, "input_schema", "inputSchema")} for t in listed.tools},
                "read_file": {"text": texts(read_file), "is_error": bool(attr(read_file, "is_error", "isError"))},
                "grep_files": {"text": texts(grep), "is_error": bool(attr(grep, "is_error", "isError"))},
                "missing": {"text": texts(missing), "is_error": bool(attr(missing, "is_error", "isError"))},
            }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
