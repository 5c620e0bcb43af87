"""The language model's loss on its C++ kernels (`nas.fast.cross_entropy`) against `F.cross_entropy`:
value, gradient, a second derivative, and the errors a user would see."""

import pytest
import torch
import torch.nn.functional as F

from nas.fast.cross_entropy import _CrossEntropy, cross_entropy
from nas.fast.kernels import compiled
from nas.fast.backends import CpuFused
from nas.lm.model import lm_loss

pytestmark = pytest.mark.skipif(compiled() is None, reason="the C++ kernels are not built")


def _inputs(dtype, rows=37, classes=1003):  # not multiples of the vector width: the row tails count
    torch.manual_seed(0)
    logits = (4 * torch.randn(rows, classes, dtype=dtype)).requires_grad_()
    return logits, torch.randint(classes, (rows,))


@pytest.mark.parametrize("dtype, tolerance", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_value_and_gradient_equal_torch(dtype, tolerance):
    logits, targets = _inputs(dtype)
    ours = cross_entropy(logits, targets)
    (grad,) = torch.autograd.grad(3 * ours, logits)  # an upstream gradient other than 1
    ref = F.cross_entropy(logits, targets)
    (ref_grad,) = torch.autograd.grad(3 * ref, logits)
    torch.testing.assert_close(ours, ref, rtol=tolerance, atol=0)
    assert float((grad - ref_grad).abs().max() / ref_grad.abs().max()) < tolerance


def test_the_kernels_run_and_a_second_derivative_goes_through():
    """lm_loss takes the kernels' Function; a Hessian-vector product (create_graph) through it equals torch's."""
    logits, targets = _inputs(torch.float64, 5, 7)
    weight = torch.randn(7, 7, dtype=torch.float64, requires_grad=True)
    v = torch.randn(7, 7, dtype=torch.float64)

    def hvp(loss_fn):
        (g,) = torch.autograd.grad(loss_fn(logits.detach() @ weight, targets), weight, create_graph=True)
        return torch.autograd.grad((g * v).sum(), weight)[0]

    assert lm_loss(logits, targets, CpuFused()).grad_fn.name() == "_CrossEntropyBackward"
    assert lm_loss(logits, targets).grad_fn.name() != "_CrossEntropyBackward"  # no backend: the definition
    torch.testing.assert_close(hvp(cross_entropy), hvp(F.cross_entropy), rtol=1e-10, atol=1e-12)


def test_a_target_out_of_range_is_an_error_not_a_crash():
    logits, targets = _inputs(torch.float32, 3, 5)
    targets[1] = 5
    with pytest.raises(RuntimeError, match="out of bounds"):
        _CrossEntropy.apply(logits, targets)


def test_under_autocast_or_on_other_dtypes_it_is_torch_s():
    logits, targets = _inputs(torch.float32, 4, 6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert cross_entropy(logits, targets).grad_fn.name() != "_CrossEntropyBackward"
    assert cross_entropy(logits.detach().half(), targets).grad_fn is None
