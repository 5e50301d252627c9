"""A bound on every plan the switches can apply, by pricing copies (a Lagrangian relaxation).

In any plan (``fleet``'s space) the copies the servers send are the copies they take in, and
the copies of each sender's traffic that get sampled are those the receivers sample:
``sum_i out_i = sum_k in_k`` and ``sum_i G_i = sum_k t_k in_k``, where ``G_i`` (at most
``out_i``) is what the receivers sample of i's copies. Pricing a copy sent at ``lam`` and a
sampled copy at ``mu`` and letting every server trade at those prices alone,

    phi_i = max  w U t + (w (1 - t) - mu) G - lam out + (lam + mu t) in
            s.t. A t + beta out + (beta + alpha t) in <= S,  0 <= G <= out <= c,  in >= 0,

over its ladder of rates t (in = 0 when sFlow is off or on the sample action's ladder), the sum
of the ``phi_i`` bounds every plan for any prices (the prices' terms add to 0 in a plan).

For a fixed t the inner problem is a fractional knapsack of two items (send, take in) in the
capacity ``S - A t``. As a function of a real t it is, between a few breakpoints (an item's gain
changes sign, the two items' ratios cross, the send item reaches c), one of three rational
functions whose derivative's numerator is at most quadratic. So between consecutive breakpoints
and critical points it is monotone, and its maximum over the infinite ladder is at the ladder
points next to one of them: ``server_best`` evaluates only those (about twenty per server),
exactly, vectorised over servers. ``price_bound`` searches the prices.
"""

from __future__ import annotations

import numpy as np

from cosample.dataplane.ipfix import SAMPLE_PROBABILITY_SCALE as SCALE
from cosample.planner.fleet import Fleet
from cosample.planner.realise import MAX_INTERVAL

#: Above this many servers the prices are searched on a sample of them (then evaluated on all).
SEARCH_SAMPLE = 2_000
#: Up to this many servers the price of a copy sent is searched too (the general case).
BOTH_PRICES_UP_TO = 64
#: Golden-section steps of each price's search (each a pass over the searched servers).
SEARCH_STEPS = 12


def value_at(fleet: Fleet, t: np.ndarray, lam: float, mu: float, full: np.ndarray, receive):
    """``phi`` at local rate ``t`` per server (the two-item knapsack), -inf where unaffordable;
    ``full``: the ladder's cost at rate 1, ``receive``: where copies may be taken in (bool or
    array)."""
    w, beta, alpha = fleet.weight, fleet.beta, fleet.alpha
    left = fleet.spare - full * t
    send = np.maximum(w * (1 - t) - mu, 0.0) - lam
    send_ratio = send / beta
    best = np.maximum(np.minimum(left, fleet.limit * beta), 0.0) * np.maximum(send_ratio, 0.0)
    if np.any(receive):
        take = np.where(receive & (t > 0), np.maximum((lam + mu * t) / (beta + alpha * t), 0), 0)
        after = np.maximum(left - fleet.limit * beta, 0.0) * take
        best = np.maximum(np.maximum(left, 0.0) * take, best + after)
    value = w * fleet.own * t + best
    with np.errstate(invalid="ignore"):
        return np.where(left >= -1e-9 * np.maximum(full * t, 1.0), value, -np.inf)


def _turning_points(fleet: Fleet, lam: float, mu: float, full: np.ndarray, receive: bool):
    """Rates t (columns) where phi's formula changes or its derivative vanishes."""
    w, u, s, a, b, c, al = (
        fleet.weight,
        fleet.own,
        fleet.spare,
        full,
        fleet.beta,
        fleet.limit,
        fleet.alpha,
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        points = [
            (s - c * b) / a,  # the send item fills c exactly
            1 - (mu + lam) / w,  # the send item's gain is 0
            1 - mu / w,  # its clipped part starts
            # f2 = w u t + (s - a t)(w (1 - t) - mu - lam)/b: its vertex
            (s * w + a * (w - mu - lam) - w * u * b) / (2 * a * w),
        ]
        if receive:
            points.append(np.full(u.size, -lam / mu if mu != 0 else np.nan))  # take gain 0
            # the ratios cross: (w (1 - t) - mu - lam)(b + al t) = b (lam + mu t), and clipped
            points += _roots(
                -w * al, (w - mu - lam) * al - w * b - b * mu, (w - mu - lam) * b - b * lam
            )
            points.append(-2 * lam * b / (lam * al + b * mu))
            # k0 t + (s' - a t)(lam + mu t)/(b + al t): derivative's numerator, four variants
            for k0 in (w * u, w * u - c * w):
                for s_left in (s, s - c * b):
                    points += _roots(
                        k0 * al * al - a * al * mu,
                        2 * b * (k0 * al - a * mu),
                        k0 * b * b + b * (s_left * mu - a * lam) - al * s_left * lam,
                    )
    return points


def _roots(qa, qb, qc) -> list[np.ndarray]:
    """Both real roots of ``qa t^2 + qb t + qc`` per server (NaN where none), or the linear one."""
    qa, qb, qc = np.broadcast_arrays(*(np.asarray(x, dtype=float) for x in (qa, qb, qc)))
    with np.errstate(divide="ignore", invalid="ignore"):
        disc = qb * qb - 4 * qa * qc
        root = np.sqrt(np.where(disc >= 0, disc, np.nan))
        linear = np.abs(qa) <= 1e-14 * (np.abs(qb) + np.abs(qc))
        one = np.where(linear, -qc / qb, (-qb + root) / (2 * qa))
        two = np.where(linear, np.nan, (-qb - root) / (2 * qa))
    return [one, two]


def _columns(fleet: Fleet) -> Fleet:
    """``fleet`` with every array as a column, to evaluate many rates per server at once."""
    return Fleet(*(getattr(fleet, name)[:, None] for name in fleet.__dataclass_fields__))


def _flow_best(fleet: Fleet, lam: float, mu: float) -> np.ndarray:
    """phi on sFlow's ladder (1/N for N >= N_min, or off), exactly."""
    n_min = fleet.n_min
    low = np.where(np.isfinite(n_min), n_min, MAX_INTERVAL)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        n = 1.0 / np.column_stack(_turning_points(fleet, lam, mu, fleet.full, True))
    n = np.where(np.isfinite(n) & (n > 0), np.minimum(n, MAX_INTERVAL), np.nan)
    candidates = np.column_stack(
        (low, np.full(fleet.size, float(MAX_INTERVAL)), np.floor(n), np.ceil(n))
    )
    candidates = np.clip(np.nan_to_num(candidates, nan=MAX_INTERVAL), low[:, None], MAX_INTERVAL)
    t = np.column_stack((np.zeros(fleet.size), 1.0 / candidates))
    receive = np.ones(t.shape, dtype=bool)
    receive[:, 0] = False  # off: copies taken in would not be sampled
    value = value_at(_columns(fleet), t, lam, mu, fleet.full[:, None], receive)
    value[:, 1:] = np.where(np.isfinite(n_min)[:, None], value[:, 1:], -np.inf)
    return value.max(axis=1)


def _sample_best(fleet: Fleet, lam: float, mu: float) -> np.ndarray:
    """phi on the sample action's ladder (K/65535 for 1 <= K <= K_max, no copies taken in);
    -inf for servers without it."""
    able = fleet.k_max >= 1
    if not able.any():
        return np.full(fleet.size, -np.inf)
    sub = fleet.take(np.flatnonzero(able))
    k = SCALE * np.column_stack(_turning_points(sub, lam, mu, sub.full_sample, False))
    top = sub.k_max[:, None]
    candidates = np.column_stack((sub.k_max, np.ones(sub.size), np.floor(k), np.ceil(k)))
    candidates = np.clip(np.nan_to_num(candidates, nan=1.0), 1.0, top)
    value = value_at(_columns(sub), candidates / SCALE, lam, mu, sub.full_sample[:, None], False)
    best = np.full(fleet.size, -np.inf)
    best[able] = value.max(axis=1)
    return best


def server_best(fleet: Fleet, lam: float, mu: float) -> np.ndarray:
    """phi_i: each server's best alone at prices (lam, mu), over every rate it may apply."""
    if lam == 0.0 and mu >= 0.0:
        return _best_unpriced_sends(fleet, mu)
    return np.maximum(_flow_best(fleet, lam, mu), _sample_best(fleet, lam, mu))


def _on_ladder(fleet: Fleet, points: list[np.ndarray], function, off: bool) -> np.ndarray:
    """max of ``function(t, at)`` (``at``: the servers t is for, None for all) over sFlow's
    rates next to each turning point in ``points`` (where it lies between 0 and 1/N_min),
    1/N_min, and 0 when ``off``; -inf where no rate is affordable. The lowest rates need no
    column: where the function falls as t rises from 0, the rates there are worth at most its
    value at 0 (off; 0 for ``f1``, at most off's ``h``), where it rises they are below the next
    turning point's."""
    n_min = fleet.n_min
    able = np.isfinite(n_min)
    low = np.where(able, n_min, MAX_INTERVAL)
    best = function(np.zeros(fleet.size), None) if off else np.full(fleet.size, -np.inf)
    best = np.maximum(best, np.where(able, function(1.0 / low, None), -np.inf))
    for t in points:
        with np.errstate(invalid="ignore"):
            inside = np.flatnonzero(able & (t > 0) & (t * low < 1.0))
        if inside.size == 0:
            continue
        with np.errstate(over="ignore"):
            n = np.minimum(1.0 / t[inside], MAX_INTERVAL)[:, None]
        m = np.maximum(np.concatenate((np.floor(n), np.ceil(n)), axis=1), low[inside, None])
        best[inside] = np.maximum(best[inside], function(1.0 / m, inside).max(axis=1))
    return best


def _gather(at, t: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """``arrays`` at the servers ``at`` (None: all), as columns when ``t`` has two dimensions."""
    if at is None:
        return list(arrays)
    return [x[at, None] if t.ndim == 2 else x[at] for x in arrays]


def _best_unpriced_sends(fleet: Fleet, mu: float) -> np.ndarray:
    """``server_best`` at lam = 0, fast: phi is the larger of taking in copies only (f1) and
    sending first, then taking in with what is left (h); each is maximised over the ladder at
    the rates next to its own turning points (fewer than in general), for the servers they
    concern only."""
    w, u, s, a = fleet.weight, fleet.own, fleet.spare, fleet.full
    b, c, al = fleet.beta, fleet.limit, fleet.alpha

    def first_send(t, at):  # h
        ww, uu, ss, aa, bb, cc, ll = _gather(at, t, w, u, s, a, b, c, al)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(t > 0, mu * t / (bb + ll * t), 0.0)
        sent = np.maximum(ww * (1 - t) - mu, 0.0) * np.clip((ss - aa * t) / bb, 0.0, cc)
        return ww * uu * t + sent + np.maximum(ss - cc * bb - aa * t, 0.0) * ratio

    def take(t, at):  # f1
        ww, uu, ss, aa, bb, ll = _gather(at, t, w, u, s, a, b, al)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(t > 0, mu * t / (bb + ll * t), 0.0)
        return ww * uu * t + np.maximum(ss - aa * t, 0.0) * ratio

    with np.errstate(divide="ignore", invalid="ignore"):
        turning = [(s - c * b) / a, 1 - mu / w, (s * w + a * (w - mu) - w * u * b) / (2 * a * w)]
        for k0 in (w * u, w * u - c * w):  # h where the send item is full: f3's critical points
            s_left = s - c * b
            turning += _roots(
                k0 * al * al - a * al * mu, 2 * b * (k0 * al - a * mu), k0 * b * b + b * s_left * mu
            )
        k0 = w * u
        roots = _roots(
            k0 * al * al - a * al * mu, 2 * b * (k0 * al - a * mu), k0 * b * b + b * s * mu
        )
    best = np.maximum(
        _on_ladder(fleet, turning, first_send, True), _on_ladder(fleet, roots, take, False)
    )
    return np.maximum(best, _sample_best(fleet, 0.0, mu))


def dual(fleet: Fleet, lam: float, mu: float) -> float:
    """The bound at prices (lam, mu): no applied plan collects more (weighted)."""
    return float(server_best(fleet, lam, mu).sum())


def price_bound(fleet: Fleet, mu_hint: float = 0.0, seed: int = 0) -> tuple[float, float, float]:
    """(bound, lam, mu): the least bound found by a search over the prices (any prices give a
    bound; the least is the tightest).

    ``mu_hint``: a good price of a sampled copy, e.g. the value of one pps of room at the
    receivers that sample 1-in-1 (``quantised.Hulls.price``). Up to ``BOTH_PRICES_UP_TO``
    servers both prices are searched; above, the price of a sampled copy alone (``lam = 0``,
    the fast case), on a random ``SEARCH_SAMPLE`` of the servers when there are more, and the
    bound is evaluated on the whole fleet once, at the price found.
    """
    top = float(np.max(fleet.weight, initial=1.0))
    if fleet.size > BOTH_PRICES_UP_TO:
        searched = fleet
        if fleet.size > SEARCH_SAMPLE:
            pick = np.random.default_rng(seed).choice(fleet.size, SEARCH_SAMPLE, replace=False)
            searched = fleet.take(np.sort(pick))
        mu = _golden(lambda m: dual(searched, 0.0, m), 0.0, max(2 * mu_hint, top), mu_hint)
        return dual(fleet, 0.0, mu), 0.0, mu
    tried: dict[tuple[float, float], float] = {}

    def at(lam: float, mu: float) -> float:
        if (lam, mu) not in tried:
            tried[(lam, mu)] = dual(fleet, lam, mu)
        return tried[(lam, mu)]

    mu = _golden(lambda m: at(0.0, m), 0.0, max(2 * mu_hint, top), mu_hint)
    lam = _golden(lambda x: at(x, mu), -mu, top, 0.0)
    mu = _golden(lambda m: at(lam, m), 0.0, max(2 * mu, top), mu)
    (lam, mu), best = min(tried.items(), key=lambda item: item[1])
    return best, lam, mu


def _golden(function, low: float, high: float, guess: float) -> float:
    """The argument of the least value found of a convex ``function`` on [low, high]
    (golden-section steps; ``guess`` and ``low`` evaluated too)."""
    ratio = (5**0.5 - 1) / 2
    a, b = low, high
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    values = {low: function(low), guess: function(guess), c: function(c), d: function(d)}
    for _ in range(SEARCH_STEPS):
        if values[c] <= values[d]:
            b, d = d, c
            c = b - ratio * (b - a)
            values[c] = function(c)
        else:
            a, c = c, d
            d = a + ratio * (b - a)
            values[d] = function(d)
    return min(values, key=lambda t: values[t])
