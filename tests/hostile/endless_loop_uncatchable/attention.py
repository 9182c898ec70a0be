"""Hostile: never return, and swallow the time-out the worker raises."""
import signal


def _forever():
    signal.signal(signal.SIGALRM, signal.SIG_IGN)
    while True:
        try:
            while True:
                pass
        except BaseException:
            pass


def softmax(x, dim=-1):
    _forever()


def causal_mask(query_len, key_len=None, *, device=None):
    _forever()


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    _forever()
