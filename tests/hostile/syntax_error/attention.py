"""Hostile (or just broken): does not compile."""
import torch


def softmax(x, dim=-1)
    return x
