"""Conversations and model turns: items, the context an upstream model reads, the upstream
client, and the Responses API's turn. No web framework: routes/ adapts these to HTTP."""
