"""Layer 1: what a course's suites import to compare outputs and gradients (on the trusted side)."""
