"""Agent, project and session memory: remember, recall (BM25), commit."""
