"""`utils.checks`: one wording per mistake, shared by every module."""

import pytest
import torch

from utils.checks import (
    check_bool,
    check_bool_mask,
    check_dropout,
    check_positive_int,
    check_token_ids,
)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: check_positive_int("d_model", True), "d_model must be a positive int, got True"),
        (lambda: check_positive_int("d_model", 0), "d_model must be a positive int, got 0"),
        (lambda: check_bool("norm_first", 1), "norm_first must be a bool, got 1"),
        (lambda: check_dropout(1.0), r"dropout must be a probability in \[0, 1\), got 1.0"),
        (lambda: check_token_ids(torch.zeros(2, 3)), "integer tensor of token ids"),
        (lambda: check_token_ids(torch.zeros(3, dtype=torch.long), "src"), r"src must be 2-D"),
        (lambda: check_bool_mask(torch.ones(2, 2)), r"mask must be a bool tensor .*torch.float32"),
        (lambda: check_bool_mask([[True]], "mask 0"), "mask 0 must be a torch.Tensor"),
    ],
)
def test_shared_argument_checks_name_the_problem(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_shared_argument_checks_pass_good_values_through():
    assert check_positive_int("n", 3) == 3
    assert check_dropout(0) == 0.0
    assert check_bool("fused", False) is False
    check_token_ids(torch.zeros(2, 3, dtype=torch.long))
    check_bool_mask(torch.ones(2, 2, dtype=torch.bool))
