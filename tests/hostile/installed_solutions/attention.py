"""Hostile: after a non-editable `pip install .`, the reference solutions sit in
site-packages next to torch; import them from there."""
from solutions.attention import *  # noqa: F401,F403
