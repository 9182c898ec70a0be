"""Hostile: never return."""


def softmax(x, dim=-1):
    while True:
        pass


def causal_mask(query_len, key_len=None, *, device=None):
    while True:
        pass


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    while True:
        pass
