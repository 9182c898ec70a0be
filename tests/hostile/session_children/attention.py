"""Hostile: leave long-sleeping processes behind, each in a session of its own."""
import os
import subprocess

import torch

MARK = "987654321"  # tests look for processes carrying it after grading


def _spawn():
    try:
        subprocess.Popen(["sleep", MARK], start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        pass
    try:
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                os.execvp("sleep", ["sleep", MARK])
            os._exit(0)
        os.waitpid(pid, 0)
    except OSError:
        pass


_spawn()


def softmax(x, dim=-1):
    _spawn()
    return torch.rand_like(x)


def causal_mask(query_len, key_len=None, *, device=None):
    return torch.rand(query_len, key_len or query_len) < 0.5


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    _spawn()
    return torch.rand(1), torch.rand(1)  # wrong in every way
