"""Layer 2: the host side of the sandbox (zygote, pool, cgroups, SandboxSubject); inside/ is what runs in the box."""

# The modules other layers (and the course) may import; the rest are this layer's own.
__all__ = ["host", "isolation", "pool", "resources"]
