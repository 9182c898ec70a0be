"""Hostile: multi-head attention from torch.nn.modules.activation.MultiheadAttention,
torch's module under the name of its defining module (not on the list)."""
import torch
from torch import nn
from torch.nn.modules.activation import MultiheadAttention as Torchs


def split_heads(x, num_heads):
    B, L, E = x.shape
    return x.reshape(B, L, num_heads, E // num_heads).transpose(1, 2)


def merge_heads(x):
    B, H, L, D = x.shape
    return x.transpose(1, 2).reshape(B, L, H * D)


class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads, *, bias=True, dropout=0.0, kdim=None, vdim=None):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.k_proj = nn.Linear(kdim or embed_dim, embed_dim, bias=bias)
        self.v_proj = nn.Linear(vdim or embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.dropout = dropout

    def forward(self, query, key=None, value=None, *, key_padding_mask=None, attn_mask=None, is_causal=False,
                need_weights=True, average_attn_weights=True):
        key = query if key is None else key
        value = key if value is None else value
        bias = self.q_proj.bias is not None
        torchs = Torchs(self.q_proj.out_features, self.num_heads, dropout=self.dropout, bias=bias, batch_first=True)
        torchs = torchs.to(query)
        with torch.no_grad():  # the weight mapping of the API page, copied in
            torchs.in_proj_weight.copy_(torch.cat([self.q_proj.weight, self.k_proj.weight, self.v_proj.weight]))
            torchs.out_proj.weight.copy_(self.out_proj.weight)
            if bias:
                torchs.in_proj_bias.copy_(torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]))
                torchs.out_proj.bias.copy_(self.out_proj.bias)
        torchs.train(self.training)
        return torchs(query, key, value, attn_mask=None if attn_mask is None else ~attn_mask,
                      need_weights=need_weights, average_attn_weights=average_attn_weights)
