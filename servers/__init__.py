"""memsync's search servers over :mod:`memsync.search`: MCP for agents (``mcp_tools``), an HTTP API
and page for tools and people (``http_api``). ``params`` is their one validator of caller input and
``render`` their one renderer, ``hosts`` their one Host/Origin rule; neither server holds search
logic.
"""
