"""Layer 2: run a course's suites over subjects and collect the points; the terminal report."""
