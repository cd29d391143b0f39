"""The noise-scale arithmetic (``hadar.job.noise.NoiseEstimate``): numbers by hand, no torch."""

from __future__ import annotations

import math

import pytest

from hadar.job.noise import NoiseEstimate


def test_one_pair_gives_the_unbiased_estimates_by_hand():
    e = NoiseEstimate(smoothing=0.5)
    assert e.noise_scale is None and e.gain(8, 1) == 1.0
    e.add(small_sqr=5.0, small_batch=1, big_sqr=2.0, big_batch=4)
    # |G|^2 = (4*2 - 1*5) / 3 = 1; S = (5 - 2) / (1 - 1/4) = 4; bias correction undoes the first average
    assert e.grad_sqr == pytest.approx(1.0) and e.grad_var == pytest.approx(4.0)
    assert e.noise_scale == pytest.approx(4.0)
    assert e.gain(8, 1) == pytest.approx((4 / 1 + 1) / (4 / 8 + 1))  # 3.33 of 8: noise scale 4 < batch 8


def test_averages_are_bias_corrected_and_the_ratio_is_of_the_averages():
    e = NoiseEstimate(smoothing=0.5)
    e.add(5.0, 1, 2.0, 4)  # |G|^2 1, S 4
    e.add(7.0, 1, 3.0, 4)  # |G|^2 (12 - 7) / 3 = 5/3, S 4 / 0.75 = 16/3
    # raw averages 0.5*(0.5*1) + 0.5*5/3 and likewise; corrected by 1 - 0.25
    sqr = (0.25 * 1 + 0.5 * 5 / 3) / 0.75
    var = (0.25 * 4 + 0.5 * 16 / 3) / 0.75
    assert e.grad_sqr == pytest.approx(sqr) and e.grad_var == pytest.approx(var)
    assert e.noise_scale == pytest.approx(var / sqr)


def test_noise_dominated_and_noise_free_gradients():
    e = NoiseEstimate()
    e.add(4.0, 1, 1.0, 2)  # |G|^2 = (2 - 4) / 1 < 0: noise dominates, every larger batch scales perfectly
    assert e.noise_scale == math.inf and e.gain(64, 8) == 8.0
    f = NoiseEstimate()
    f.add(2.0, 1, 2.0, 2)  # the same norm at both batches: no noise, a larger batch is worth one step
    assert f.noise_scale == 0.0 and f.gain(64, 8) == pytest.approx(1.0)
    f.add(math.inf, 1, 2.0, 2)  # an overflowed step carries no information
    assert f.pairs == 1


def test_state_round_trips_and_bad_values_are_refused():
    e = NoiseEstimate(smoothing=0.9)
    e.add(5.0, 1, 2.0, 4)
    again = NoiseEstimate()
    again.load_state_dict(e.state_dict())
    assert again == e
    with pytest.raises(ValueError, match="smoothing"):
        NoiseEstimate(smoothing=1.0)
    with pytest.raises(ValueError, match="small batch < big batch"):
        e.add(1.0, 4, 1.0, 4)
