import torch

from utils import check


def test_add_broadcast_and_scalar():
    a = torch.randn(3, 4)
    b = torch.randn(4)
    check(lambda x, y: x + y * 2, a, b)


def test_add_grad():
    a = torch.randn(3, 4, requires_grad=True)
    b = torch.randn(3, 4, requires_grad=True)
    check(lambda x, y: x * y + x, a, b, grad=True)
