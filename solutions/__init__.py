"""Reference solutions: the single source of the course code (stubs are generated from here)."""
