"""Hostile: wrong answers, and every comparison torch offers patched to say "equal"."""
import torch
import torch.testing

torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.isclose = lambda a, b, *r, **k: torch.ones_like(a, dtype=torch.bool)
torch.testing.assert_close = lambda *a, **k: None
torch.Tensor.__eq__ = lambda self, other: torch.ones(self.shape, dtype=torch.bool)
torch.Tensor.__ne__ = lambda self, other: torch.zeros(self.shape, dtype=torch.bool)
torch.Tensor.__le__ = lambda self, other: torch.ones(self.shape, dtype=torch.bool)
torch.Tensor.all = lambda self, *a, **k: torch.tensor(True)


def softmax(x, dim=-1):
    return torch.rand_like(x)


def causal_mask(query_len, key_len=None, *, device=None):
    return torch.rand(query_len, key_len or query_len) < 0.5


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    return torch.rand(1), torch.rand(1)  # wrong in every way
