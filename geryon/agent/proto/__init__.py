"""The agent's gRPC API: agent.proto and the stubs protoc generates from it (committed, checked current)."""
