"""Hostile: write a fake results.json wherever it might be read, and print "100 passed"."""
import json
import os

import torch

FAKE = {"submission": "forged", "score": 52.0, "max_score": 52.0,
        "units": {"attention": {"title": "forged", "score": 52.0, "max_score": 52.0, "status": "graded", "message": "", "tests": []}}}


def _forge():
    here = os.path.dirname(os.path.abspath(__file__))
    places = [os.getcwd(), here, os.path.join(here, "results"), os.path.join(os.getcwd(), "results")]
    folder = here
    for _ in range(6):
        folder = os.path.dirname(folder)
        places += [folder, os.path.join(folder, "results")]
    for place in places:
        try:
            os.makedirs(place, exist_ok=True)
            with open(os.path.join(place, "results.json"), "w") as handle:
                json.dump(FAKE, handle)
        except OSError:
            pass
    print("=================== 100 passed in 0.01s ===================")
    print(json.dumps(FAKE))


_forge()


def softmax(x, dim=-1):
    _forge()
    return torch.rand_like(x)


def causal_mask(query_len, key_len=None, *, device=None):
    return torch.rand(query_len, key_len or query_len) < 0.5


def scaled_dot_product_attention(query, key, value, attn_mask=None, *, is_causal=False, scale=None, dropout_p=0.0):
    return torch.rand(1), torch.rand(1)  # wrong in every way
