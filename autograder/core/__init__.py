"""Layer 0, the shared vocabulary: the manifest and settings, i18n, the Call/Result protocol and
Subject, the value codec and cases, results, safe text and redaction, a grading process's heavy
imports, exit without garbage collection, lateness and versions. Imports no other layer."""

# The modules other layers (and the course) may import; the rest are this layer's own.
__all__ = ["cases", "errors", "heavy_imports", "i18n", "lateness", "manifest", "protocol", "redact",
           "results", "safe_text", "settings", "shutdown", "value_codec", "versions"]
