"""The official MCP Python SDK as a client of `logbook mcp`.

Usage: python3 api/tests/mcp_client.py LOGBOOK_BINARY ROOT

`api/tests/mcp.rs` builds ROOT with the Host API and runs this script; the Sessions it
holds are described there (`build_root`). The script starts `LOGBOOK_BINARY mcp --root ROOT`
through `mcp.client.stdio.stdio_client`, initialises a `ClientSession` (the handshake of
2025-11-25), and checks every tool as a model would use it: the answers hold the expected text, long fields are cut with a
note, and following the "call ... with {...}" line each answer ends with reaches every row,
hit and Session exactly once. It prints "mcp_client: all checks passed" at the end and exits
non-zero (an assertion) at the first check that fails. A second connection speaks the
2026-07-28 revision (`server/discover`, no handshake) and checks the tools again.
"""

import asyncio
import json
import re
import sys

from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

# The same text as `long_body()` in api/tests/mcp.rs.
LONG_BODY = "ü" * 1500 + " the tombstone outlives compaction " + "ß" * 1500
TITLE = "Why the tombstone stays"
TOOLS = {"list_sessions", "search_sessions", "read_history", "read_source"}
# Rows of s1, newest first (see build_root in api/tests/mcp.rs).
S1_ROWS = ["15.0", "13.0", "11.0", "9.0", "7.0", "4.0", "3.1", "3.0", "2.0"]
# Most calls a pagination loop makes before the test calls it endless.
FOLLOW_MAX = 50


def text_of(result):
    """The text of a tool result (one text block)."""
    assert result.content, f"no content: {result}"
    assert result.content[0].type == "text", result.content[0]
    return result.content[0].text


async def ok(session, tool, arguments):
    """Calls a tool that must succeed; returns its text."""
    result = await session.call_tool(tool, arguments)
    text = text_of(result)
    assert not result.is_error, f"{tool} {arguments} failed: {text}"
    return text


async def fails(session, tool, arguments, *words):
    """Calls a tool that must answer a tool error holding `words`; returns its text."""
    result = await session.call_tool(tool, arguments)
    text = text_of(result)
    assert result.is_error, f"{tool} {arguments} should fail, answered: {text}"
    for word in words:
        assert word in text, f"{tool} error lacks {word!r}: {text}"
    return text


def next_call(text, tool):
    """The arguments of the call the answer says comes next, or None at the end."""
    found = re.search(r"call " + tool + r" with (\{.*\})\s*\)?\s*$", text, re.MULTILINE)
    return json.loads(found.group(1)) if found else None


async def follow(session, tool, arguments):
    """Every answer from `arguments` on, following the "call TOOL with {...}" hints."""
    answers = []
    while arguments is not None:
        assert len(answers) < FOLLOW_MAX, f"{tool} never ended"
        text = await ok(session, tool, arguments)
        answers.append(text)
        arguments = next_call(text, tool)
    return answers


async def check_tools(session):
    listed = await session.list_tools()
    names = {t.name for t in listed.tools}
    assert names == TOOLS, names
    for tool in listed.tools:
        assert tool.description and len(tool.description) > 100, tool
        schema = tool.input_schema
        assert schema["type"] == "object", schema
        for name, prop in schema.get("properties", {}).items():
            assert prop.get("description"), f"{tool.name}.{name} has no description"
        assert tool.annotations and tool.annotations.read_only_hint, tool


async def check_list_sessions(session):
    text = await ok(session, "list_sessions", {})
    assert text.index("- s2 ") < text.index("- s1 "), text  # newest activity first
    assert f'"{TITLE}"' in text, text
    assert '"The build is green again."' in text, text  # a title from the first message
    assert "That is the last Session." in text, text
    pages = await follow(session, "list_sessions", {"limit": 1})
    assert len(pages) == 2, pages
    assert "- s2 " in pages[0] and "- s1 " not in pages[0], pages[0]
    assert "- s1 " in pages[1] and "That is the last Session." in pages[1], pages[1]


HIT = re.compile(r"^  (\d+\.\d+) (\w+): (.*)$", re.MULTILINE)


async def check_search(session):
    text = await ok(session, "search_sessions", {"query": "TOMBSTONE"})
    hits = HIT.findall(text)
    assert "Session s1 " + json.dumps(TITLE) in text, text
    assert ("6.0", "title", "Why the «tombstone» stays") in hits, hits
    body = [h for h in hits if h[:2] == ("3.0", "body")]
    assert len(body) == 1, hits
    snippet = body[0][2]
    # A window around the match, not the 6 KB field.
    assert "ü the «tombstone» outlives compaction ß" in snippet and len(snippet.encode()) < 400, snippet
    assert snippet.startswith("…") and snippet.endswith("…"), snippet
    assert "That is every hit." in text, text
    assert "s2" not in {h for h in re.findall(r"^Session (\S+)", text, re.MULTILINE)}
    # One hit per answer, followed to the end: the same hits, each once, in the same order.
    pages = await follow(session, "search_sessions", {"query": "tombstone", "limit": 1})
    followed = [h for page in pages for h in HIT.findall(page)]
    assert followed == hits, (followed, hits)
    assert "That is every hit." in pages[-1], pages[-1]
    # Scoped to s2, nothing is found.
    text = await ok(session, "search_sessions", {"query": "tombstone", "sessionIds": ["s2"]})
    assert text.startswith("0 hit(s)") and "That is every hit." in text, text


ROW = re.compile(r"^\[(\d+\.\d+)\] (\w+)", re.MULTILINE)


async def check_history(session):
    pages = await follow(session, "read_history", {"sessionId": "s1", "limit": 3})
    assert len(pages) == 3, pages
    rows = [r for page in pages for r, _ in ROW.findall(page)]
    assert rows == S1_ROWS, rows
    assert "Older rows follow: call read_history with" in pages[0], pages[0]
    assert "That is the start of the Session." in pages[-1], pages[-1]
    assert f'Session s1 "{TITLE}"' in pages[0], pages[0]
    whole = "".join(pages)
    assert "[3.1] toolCall read_file" in whole and 'arguments: {"path":"compact.rs"}' in whole
    assert "thinking: Look at the compactor." in whole, whole
    assert "body: fn compact() { keep_tombstones(); }" in whole, whole

    # Forward from an anchor (as a search hit is opened).
    text = await ok(
        session,
        "read_history",
        {"sessionId": "s1", "anchorSequence": 3, "direction": "forward", "limit": 2},
    )
    assert [r for r, _ in ROW.findall(text)] == ["3.0", "3.1"], text
    assert "Newer rows follow: call read_history with" in text, text

    # The long body is cut at fieldBytes, and the note's read_source call reads the rest.
    text = await ok(
        session,
        "read_history",
        {"sessionId": "s1", "anchorSequence": 3, "direction": "forward", "limit": 1},
    )
    shown = re.search(r"^body: (.*)$", text, re.MULTILINE).group(1)
    assert LONG_BODY.startswith(shown) and len(shown.encode()) == 1000, shown
    note = re.search(r"^\[body cut: 1000 of (\d+) bytes shown; read_source (\{.*\}) reads the rest\]$", text, re.MULTILINE)
    assert note, text
    assert int(note.group(1)) == len(LONG_BODY.encode()), note.group(0)
    rest = json.loads(note.group(2))
    assert rest["offset"] == 1000, rest
    rest["maxBytes"] = 777  # odd, so pieces end inside two-byte characters unless cut well
    pieces = await follow(session, "read_source", rest)
    assert len(pieces) > 3, pieces
    read = shown
    for piece in pieces:
        body = piece.split("\n", 1)[1]
        read += body[: body.rindex("\n(")]
    assert read == LONG_BODY, "the pieces do not make the whole field"
    assert pieces[-1].rstrip().endswith("(end of the field)"), pieces[-1]


async def check_source(session):
    text = await ok(
        session,
        "read_source",
        {"sessionId": "s1", "sequence": 3, "itemIndex": 1, "field": "arguments"},
    )
    assert "(the whole field)" in text and '{"path":"compact.rs"}' in text, text


async def check_errors(session):
    await fails(session, "read_history", {"sessionId": "nope"}, "not_found", "nope")
    await fails(session, "read_source", {"sessionId": "s1", "sequence": 99}, "not_found")
    await fails(session, "read_source", {"sessionId": "nope", "sequence": 2}, "not_found")
    await fails(session, "read_history", {"sessionId": "s1", "limit": "many"}, "invalid_argument")
    await fails(session, "read_history", {"sessionId": "s1", "limit": 0}, "invalid_argument")
    await fails(session, "list_sessions", {"after": "not a cursor"}, "invalid_argument")
    await fails(session, "search_sessions", {"query": ""}, "invalid_argument")
    # The server still answers after errors.
    await ok(session, "list_sessions", {"limit": 1})


async def main(binary, root):
    params = StdioServerParameters(command=binary, args=["mcp", "--root", root])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "logbook", init
            assert init.capabilities.tools is not None, init
            await check_tools(session)
            await check_list_sessions(session)
            await check_search(session)
            await check_history(session)
            await check_source(session)
            await check_errors(session)
    # The 2026-07-28 revision has no handshake: the client asks `server/discover` and then
    # names the version in each request.
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.discover()
            assert session.protocol_version == "2026-07-28", session.protocol_version
            await check_tools(session)
            await check_list_sessions(session)
            await fails(session, "read_history", {"sessionId": "nope"}, "not_found")
    print("mcp_client: all checks passed")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: mcp_client.py LOGBOOK_BINARY ROOT")
    asyncio.run(main(sys.argv[1], sys.argv[2]))
