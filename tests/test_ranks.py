"""The ranking rule of tests/ranks.py, on planted swaps inside and outside the tolerance."""
from ranks import ranking_difference

SCORES = [0.0, 5.0, 4.99995, 3.0, 2.9, 1.0]  # id -> score: ids 1, 2, 3, 4 ranked


def test_a_swap_within_the_tolerance_passes_and_beyond_it_fails():
    assert ranking_difference([1, 2, 3], SCORES, 1e-4) is None
    assert ranking_difference([2, 1, 3], SCORES, 1e-4) is None  # 5.0 and 4.99995
    assert ranking_difference([2, 1, 3], SCORES, 1e-5).startswith("place 1: id 2 ")
    assert ranking_difference([1, 3, 2], SCORES, 1e-4).startswith("place 2: id 3 ")
    assert ranking_difference([1, 2, 4, 3], SCORES, 0.2) is None  # 3.0 and 2.9
    assert ranking_difference([1, 2, 4, 3], SCORES, 0.05).startswith("place 3: id 4 ")


def test_the_last_may_give_way_only_to_a_near_tie_and_an_argmax_is_one_id():
    assert ranking_difference([1, 2, 4], SCORES, 0.2) is None  # 2.9 for 3.0, at the end
    assert ranking_difference([1, 2, 5], SCORES, 0.2).startswith("place 3: id 5 ")
    assert ranking_difference([2], SCORES, 1e-4) is None
    assert ranking_difference([3], SCORES, 1e-4).startswith("place 1: id 3 ")
    assert ranking_difference([1, 1], SCORES, 1e-4) == "ids [1, 1] repeat one"


def test_tensors_are_read_as_scores():
    import torch

    assert ranking_difference([2, 1], torch.tensor(SCORES), 1e-4) is None
    assert ranking_difference([3, 1], torch.tensor(SCORES), 1e-4) is not None
