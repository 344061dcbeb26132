"""Layer 0: files and atomic writes, console and log output, tables, config resolvers, what a model target names."""
