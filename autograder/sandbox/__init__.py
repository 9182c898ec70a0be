"""Layer 1: the host side of the sandbox (zygote, pool, cgroups, SandboxSubject); inside/ is what runs in the box."""
