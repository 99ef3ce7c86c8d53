"""HTTP routes: thin adapters from JSON to the core pipeline and the gRPC clients."""
