"""``sandloop mcp``: sandloop's sandbox, policy and audit log behind any MCP client.

The server is one more front-end over the toolbox ``sandloop run`` uses: every MCP session gets
its own run (:class:`executor.run.Run`: the policy, the Docker session, the audit chain and the
run folder), opened at its first tool call and closed when the session ends. The modules, top to
bottom:

``cli``        the ``sandloop mcp`` subcommand; imports the SDK only when it runs
``http``       Streamable HTTP on loopback: the bearer token, the bind rules, uvicorn
``server``     the MCP SDK's low-level server: tools/list, tools/call, one session per connection
``session``    one MCP session's run, opened lazily, its calls logged for ``sandloop report``
``approvals``  the policy's prompts, asked through MCP elicitation (or refused)
``calls``      a tool call through sandloop's own handlers, as structured content and text
``tools``      the tools' names and JSON Schemas (input and output)

Only ``server`` and ``http`` import the ``mcp`` package (the ``sandloop[mcp]`` extra); this
package's ``__init__`` imports nothing, so ``sandloop`` starts without it.
"""
