"""What runs inside the sandbox, copied there whole: the worker, the transport, rlimits and the /proc reader. Imports only core."""
