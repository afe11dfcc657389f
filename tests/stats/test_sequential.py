"""stats/sequential.py: the anytime-valid confidence sequence, by simulation and against a direct computation.

The coverage simulation: paired binary outcomes with a known finite-population ΔP,
scored in a random order in rounds, stopped by the three rules; the interval at the stopping time must
cover the full-run ΔP in ≥ 95 % of the runs (minus Monte-Carlo error). The same simulation with a fixed-n
t interval re-checked after every round under-covers, which shows the harness can tell the two apart.
"""

import json
import math

import numpy as np
import pytest
from scipy import stats

from layerprobe.stats.sequential import (
    ConfidenceSequence,
    confidence_interval,
    predictable_bets,
    scoring_order,
    stop_reason,
)

POPULATION = 400
ROUND = 20
EFFECTS = (0.0, 0.03, 0.08, 0.2)
HALF_WIDTHS = (0.05, 0.1)
RUNS = 150  # per (effect, H): 8 × 150 = 1,200 sequential runs
DISCORDANT = 0.1  # P(baseline right, variant wrong); P(baseline wrong, variant right) = this + effect


def paired_populations(rng, runs, population, effect):
    """Per-document differences variant − baseline of paired binary outcomes, shuffled: (runs, population)."""
    baseline = rng.random((runs, population)) < 0.6
    loss = baseline & (rng.random((runs, population)) < DISCORDANT / 0.6)
    gain = ~baseline & (rng.random((runs, population)) < (DISCORDANT + effect) / 0.4)
    variant = np.where(baseline, ~loss, gain)
    d = variant.astype(float) - baseline.astype(float)
    return rng.permuted(d, axis=1)


def t_interval(d, population):
    """The fixed-n 95 % t interval of a without-replacement sample mean (with the finite-population correction)."""
    t = d.shape[1]
    half = (
        stats.t.ppf(0.975, t - 1)
        * d.std(axis=1, ddof=1)
        / math.sqrt(t)
        * math.sqrt((population - t) / (population - 1))
    )
    return d.mean(axis=1) - half, d.mean(axis=1) + half


def sequential_run(interval_fn, effect, half_width, seed):
    """Score RUNS populations round by round, stop each by `stop_reason`; the interval at the stop vs the truth."""
    d = paired_populations(np.random.default_rng(seed), RUNS, POPULATION, effect)
    truth = d.mean(axis=1)
    low, high = np.full(RUNS, -1.0), np.full(RUNS, 1.0)
    stopped = np.zeros(RUNS, dtype=bool)
    reasons = []
    for seen in range(ROUND, POPULATION + 1, ROUND):
        active = np.flatnonzero(~stopped)
        low[active], high[active] = interval_fn(d[active, :seen])
        for run in active:
            reason = stop_reason((low[run], high[run]), half_width=half_width, seen=seen, population=POPULATION)
            if reason is not None:
                stopped[run] = True
                reasons.append(reason)
    assert stopped.all()
    return (low <= truth) & (truth <= high), reasons


def simulate(interval_fn):
    covered, reasons = {}, []
    for i, effect in enumerate(EFFECTS):
        for j, half_width in enumerate(HALF_WIDTHS):
            covered[effect, half_width], why = sequential_run(interval_fn, effect, half_width, seed=100 + 10 * i + j)
            reasons += why
    return covered, reasons


def betting(d):
    return confidence_interval(d, low_bound=-1.0, high_bound=1.0, population=POPULATION)


def wald(d):
    return t_interval(d, POPULATION)


def monte_carlo_floor(runs, level=0.95):
    return level - 3 * math.sqrt(level * (1 - level) / runs)


@pytest.fixture(scope="module")
def betting_simulation():
    return simulate(betting)


def test_confidence_sequence_covers_at_the_stopping_time(betting_simulation):
    covered, reasons = betting_simulation
    every = np.concatenate(list(covered.values()))
    assert len(every) >= 1000
    assert {"precision", "settled"} <= set(reasons)  # the stop rules were exercised
    assert every.mean() >= monte_carlo_floor(len(every))
    for cell in covered.values():
        assert cell.mean() >= monte_carlo_floor(len(cell))


def test_fixed_n_interval_rechecked_every_round_under_covers(betting_simulation):
    covered, _ = simulate(wald)
    every = np.concatenate(list(covered.values()))
    assert every.mean() < monte_carlo_floor(len(every))
    null = np.concatenate([covered[0.0, h] for h in HALF_WIDTHS])
    assert null.mean() < 0.9  # with no effect, 20 looks at a 95 % interval exclude the truth far too often
    betting_covered = np.concatenate(list(betting_simulation[0].values()))
    assert betting_covered.mean() - every.mean() > 0.03


@pytest.mark.slow  # over 2.5 s on 2 cores: the default tier stays under 3 minutes
def test_with_replacement_covers_an_iid_mean():
    rng = np.random.default_rng(5)
    runs, mean = 600, 0.3
    x = (rng.random((runs, 300)) < 0.5 + mean / 2).astype(float) * 2 - 1  # ±1, E = 0.3
    never_missed = np.ones(runs, dtype=bool)
    for seen in range(10, 301, 10):
        low, high = confidence_interval(x[:, :seen], low_bound=-1, high_bound=1, population=None)
        never_missed &= (low <= mean) & (mean <= high)
    assert never_missed.mean() >= monte_carlo_floor(runs)  # time-uniform: covered at all 30 looks at once


# --------------------------------------------------------------------------- a direct computation
def grid_confidence_sequence(x, population, alpha=0.05, breaks=2000):
    """Waudby-Smith & Ramdas's hedged capital, written out loop by loop on a grid of candidate means.

    Like confseq's `betting_mart` + `cs_from_martingale`: for each m on the grid, multiply the capital
    observation by observation; m is in the set while max(K⁺, K⁻) / 2 < 1/α. x on [0, 1].
    """
    inside = []
    total = sum(x)
    for k in range(breaks + 1):
        m = k / breaks
        if not total / population <= m <= (total + population - len(x)) / population:
            continue
        up = down = 1.0
        variance, seen_sum = 0.25, 0.0
        for i, xi in enumerate(x, start=1):
            bet = math.sqrt(2 * math.log(2 / alpha) / (variance * i * math.log(1 + i)))
            mu = min(max((population * m - seen_sum) / (population - i + 1), 0.0), 1.0)
            up *= 1 + min(bet, 0.5 / mu if mu > 0 else math.inf) * (xi - mu)
            down *= 1 - min(bet, 0.5 / (1 - mu) if mu < 1 else math.inf) * (xi - mu)
            seen_sum += xi
            mean_now = min((0.5 + seen_sum) / (i + 1), 1.0)
            variance = (variance * i + (xi - mean_now) ** 2) / (i + 1)
        if max(up, down) / 2 < 1 / alpha:
            inside.append(m)
    return min(inside), max(inside)


@pytest.mark.parametrize("probabilities", [(0.1, 0.75, 0.15), (0.3, 0.4, 0.3), (0.0, 0.9, 0.1)])
def test_interval_matches_a_grid_computation(probabilities):
    rng = np.random.default_rng(11)
    population = 150
    d = rng.choice([-1.0, 0.0, 1.0], p=probabilities, size=60)
    x = list((d + 1) / 2)
    grid_low, grid_high = (2 * m - 1 for m in grid_confidence_sequence(x, population))
    low, high = confidence_interval(d[None, :], low_bound=-1, high_bound=1, population=population)
    step = 2 / 2000  # one grid step on the scale of d
    assert grid_low - step <= low[0] <= grid_low + 1e-6
    assert grid_high - 1e-6 <= high[0] <= grid_high + step


def test_predictable_bets_use_only_the_past():
    rng = np.random.default_rng(2)
    x = rng.random(50)
    bets = predictable_bets(x, 0.05)
    changed = x.copy()
    changed[30:] = 1 - changed[30:]
    assert np.array_equal(predictable_bets(changed, 0.05)[:31], bets[:31])
    assert bets[0] == pytest.approx(math.sqrt(2 * math.log(40) / (0.25 * math.log(2))))


# ----------------------------------------------------------------------------------- unit tests
def paired_stream(seed, size=600, probabilities=(0.1, 0.75, 0.15)):
    return np.random.default_rng(seed).choice([-1.0, 0.0, 1.0], p=probabilities, size=size)


def test_width_shrinks_as_documents_come_in():
    d = paired_stream(1)
    state = ConfidenceSequence(population=5000)
    widths = [state.half_width]
    for start in range(0, 600, 50):
        state.update(d[start : start + 50])
        widths.append(state.half_width)
    assert widths[0] == 1.0
    assert widths[-1] < widths[6] < widths[2] < widths[1] < widths[0]
    assert widths[-1] < 0.1


def test_interval_contains_the_running_mean_and_the_full_run_mean_at_the_end():
    population = 240
    for seed in range(20):
        d = paired_stream(seed, size=population, probabilities=(0.2, 0.5, 0.3))
        state = ConfidenceSequence(population=population)
        for start in range(0, population, 12):
            low, high = state.update(d[start : start + 12])
            assert low <= state.mean <= high
        assert state.interval == pytest.approx((d.mean(), d.mean()), abs=1e-9)
        assert state.stop(0.01) == "exhausted"


def test_degenerate_lazy_block_still_reaches_the_target_width():
    state = ConfidenceSequence(population=100_000)
    reason = None
    while reason is None:
        state.update(np.zeros(50))
        reason = state.stop(0.01)
    assert reason == "precision"
    low, high = state.interval
    assert low < 0 < high
    # about log(2/α)/t on each side for data that never move: ≈ 740 documents for ±0.01
    assert state.seen <= 1000


def test_deterministic_and_order_is_seeded():
    d = paired_stream(4)
    first, second = ConfidenceSequence(population=1000), ConfidenceSequence(population=1000)
    assert [first.update(d[i : i + 40]) for i in range(0, 600, 40)] == [
        second.update(d[i : i + 40]) for i in range(0, 600, 40)
    ]
    assert np.array_equal(scoring_order(500, 7), scoring_order(500, 7))
    assert sorted(scoring_order(500, 7)) == list(range(500))
    assert not np.array_equal(scoring_order(500, 7), scoring_order(500, 8))


def test_state_round_trips_through_its_dict_and_resumes_identically():
    d = paired_stream(5)
    whole = ConfidenceSequence(low_bound=-1, high_bound=1, population=800)
    for start in range(0, 600, 60):
        whole.update(d[start : start + 60])
    resumed = ConfidenceSequence(population=800)
    for start in range(0, 300, 60):
        resumed.update(d[start : start + 60])
    resumed = ConfidenceSequence.from_dict(json.loads(json.dumps(resumed.to_dict())))
    for start in range(300, 600, 60):
        resumed.update(d[start : start + 60])
    assert resumed == whole
    assert ConfidenceSequence.from_dict(whole.to_dict()) == whole
    with pytest.raises(ValueError, match="kind"):
        ConfidenceSequence.from_dict({**whole.to_dict(), "kind": "wald"})


def test_batch_and_one_at_a_time_updates_agree():
    d = paired_stream(6, size=120)
    batch, single = ConfidenceSequence(population=300), ConfidenceSequence(population=300)
    batch.update(d)
    for value in d:
        single.update([value])
    assert single.interval == batch.interval
    assert single.differences == batch.differences
    assert (batch.looks, single.looks) == (1, 120)


def test_state_agrees_with_the_vectorised_runs():
    d = np.stack([paired_stream(seed, size=200) for seed in range(4)])
    low, high = confidence_interval(d, low_bound=-1, high_bound=1, population=500)
    for run in range(4):
        state = ConfidenceSequence(population=500)
        state.update(d[run, :77])
        assert state.update(d[run, 77:]) == (low[run], high[run])


def test_range_is_mapped_affinely():
    d = paired_stream(7, size=200)
    low, high = confidence_interval(d[None], low_bound=-1, high_bound=1, population=400)
    shifted_low, shifted_high = confidence_interval(3 * d[None] + 2, low_bound=-1, high_bound=5, population=400)
    assert shifted_low[0] == pytest.approx(3 * low[0] + 2, abs=1e-6)
    assert shifted_high[0] == pytest.approx(3 * high[0] + 2, abs=1e-6)


def test_invalid_input_is_refused():
    with pytest.raises(ValueError, match="outside"):
        ConfidenceSequence().update([1.5])
    with pytest.raises(ValueError, match="population"):
        ConfidenceSequence(population=3).update([0, 0, 0, 0])
    with pytest.raises(ValueError, match="empty"):
        ConfidenceSequence(low_bound=1, high_bound=1)
    with pytest.raises(ValueError, match="alpha"):
        ConfidenceSequence(alpha=0)
    state = ConfidenceSequence(population=10)
    assert state.update([]) == (-1.0, 1.0) and state.looks == 0 and state.stop(0.1) is None


def test_stop_rules_and_their_order():
    assert stop_reason((-0.01, 0.01), half_width=0.02, seen=10, population=10) == "exhausted"
    assert stop_reason((0.01, 0.03), half_width=0.02, seen=5, population=10) == "precision"
    assert stop_reason((0.01, 0.2), half_width=0.02, seen=5, population=10) == "settled"
    assert stop_reason((-0.2, -0.01), half_width=None, seen=5, population=None) == "settled"
    assert stop_reason((0.01, 0.2), half_width=0.02, seen=5, population=10, settle=False) is None
    assert stop_reason((-0.1, 0.2), half_width=0.02, seen=5, population=10) is None
