"""Sessions (chunks, lineage, usage), agents, providers, tools, sandbox and streaming."""
