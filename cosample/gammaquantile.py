"""Quantiles of the gamma distribution without scipy (pure; the intervals' Garwood bounds).

``gammaincinv(a, q)`` is the ``x`` with ``P(a, x) = q``, ``P`` the regularized lower incomplete
gamma function: what ``scipy.special.gammaincinv`` gives (at most 1.5e-12 apart, relative, in
18,000 random draws of shape 1e-3 to 1e12; tests/core/test_gammaquantile.py holds it to
1e-9). Written here because importing scipy.special took 0.2 CPU seconds of every ``collector
replay`` (docs/collector.md, "Speed"); a bound costs about 13 µs.

``P`` and ``Q = 1 - P`` come from the power series (``x < a + 1``) or the continued fraction
(Lentz) for small ``a``, and for ``a >= TEMME_MIN_A`` from Temme's uniform asymptotic expansion
(DLMF 8.12.3-8.12.11), whose cost does not grow with ``a``:

    Q(a, x) = erfc(eta sqrt(a / 2)) / 2 + exp(-a eta^2 / 2) / sqrt(2 pi a) sum_k c_k(eta) / a^k

with ``lambda = x / a``, ``eta^2 / 2 = lambda - 1 - ln(lambda)``, ``c_0 = 1/(lambda-1) - 1/eta``
and ``c_k = c_{k-1}'(eta) / eta + (-1)^k g_k / (lambda - 1)`` (``g_k``: Stirling's series of
``Gamma*``). In closed form each ``c_k`` loses digits near ``eta = 0``, by ``1 / |z|^(2k+1)``
with ``z = eta sqrt(a)`` after the factor in front; so within ``|z| < TEMME_MIN_Z`` (the middle
of the distribution, never the 2.5 % tails the intervals ask for) the series or fraction is
used, exact at any ``a`` but slower for large ones. The inverse is Halley's method on ``P``
kept inside a bracket, from the Wilson-Hilferty guess.
"""

from __future__ import annotations

import math

#: From this shape on the uniform expansion is used (truncated after ``c_4``: it agrees with the
#: series and the fraction to 1e-12 there, tests/core/test_gammaquantile.py) ...
TEMME_MIN_A = 100.0
#: ... unless ``|eta| sqrt(a)`` is below this (cancellation in the closed forms, module docstring).
TEMME_MIN_Z = 1.0
#: Stirling's series of Gamma*(a) = Gamma(a) / (sqrt(2 pi / a) (a / e)^a): sum g_k / a^k.
STIRLING = (1.0, 1 / 12, 1 / 288, -139 / 51840, -571 / 2488320, 163879 / 209018880)
_EPS = 1e-16
_TINY = 1e-300
_MAX_TERMS = 100_000_000


def _temme_terms(count: int) -> list[tuple[float, dict[int, float]]]:
    """``c_k = alpha_k eta^-(2k+1) + sum_j b_kj mu^-j`` (``mu = lambda - 1``) for k < count, by
    the recursion in the module docstring: ``(1/eta) d/deta`` takes ``eta^-m`` to
    ``-m eta^-(m+2)`` and, as ``dmu/deta = eta (mu + 1) / mu``, ``mu^-j`` to
    ``-j mu^-(j+1) - j mu^-(j+2)``."""
    terms = [(-1.0, {1: 1.0})]
    for k in range(1, count):
        alpha, powers = terms[-1]
        following: dict[int, float] = {1: (-1) ** k * STIRLING[k]}
        for j, b in powers.items():
            following[j + 1] = following.get(j + 1, 0.0) - j * b
            following[j + 2] = following.get(j + 2, 0.0) - j * b
        terms.append((-(2 * k - 1) * alpha, following))
    return terms


_TERMS = _temme_terms(5)


def _half_eta_squared(mu: float) -> float:
    """``mu - log(1 + mu)`` without the cancellation near 0."""
    if abs(mu) >= 0.1:
        return mu - math.log1p(mu)
    total, power, k = 0.0, mu * mu, 2
    while True:
        term = power / k
        total += term if k % 2 == 0 else -term
        if abs(term) <= 1e-18 * total:
            return total
        power *= mu
        k += 1


def _gamma_star(a: float) -> float:
    """``Gamma*(a)`` for ``a >= TEMME_MIN_A`` (Stirling's series, six terms: < 1e-15 there)."""
    return sum(g / a**k for k, g in enumerate(STIRLING))


def _temme(a: float, x: float) -> tuple[float, float, float] | None:
    """(P, Q, density at x) by the uniform expansion, or None where it loses digits."""
    mu = (x - a) / a
    half = _half_eta_squared(mu)
    eta = math.copysign(math.sqrt(2.0 * half), mu)
    if abs(eta) * math.sqrt(a) < TEMME_MIN_Z:
        return None
    total, scale = 0.0, 1.0
    for k, (alpha, powers) in enumerate(_TERMS):
        if scale < 1e-20:
            break
        c = alpha * eta ** -(2 * k + 1) + sum(b * mu**-j for j, b in powers.items())
        total += c * scale
        scale /= a
    front = math.exp(-a * half)
    remainder = front / math.sqrt(2.0 * math.pi * a) * total
    root = math.copysign(math.sqrt(a * half), mu)
    upper = 0.5 * math.erfc(root) + remainder
    lower = 0.5 * math.erfc(-root) - remainder
    density = front * math.sqrt(a / (2.0 * math.pi)) / (x * _gamma_star(a))
    return lower, upper, density


def _classic(a: float, x: float) -> tuple[float, float, float]:
    """(P, Q, density at x) by the power series (x < a + 1) or the continued fraction."""
    if a >= TEMME_MIN_A:  # x^a e^-x / Gamma(a) without the cancellation of a ln x - lgamma(a)
        log_front = (
            0.5 * math.log(a / (2.0 * math.pi))
            - math.log(_gamma_star(a))
            - a * _half_eta_squared((x - a) / a)
        )
    else:
        log_front = a * math.log(x) - x - math.lgamma(a)
    log_density = log_front - math.log(x)
    density = math.exp(log_density) if log_density < 700.0 else math.inf
    if x < a + 1.0:
        term = total = 1.0 / a
        n = a
        for _ in range(_MAX_TERMS):
            n += 1.0
            term *= x / n
            total += term
            if term < total * _EPS:
                break
        lower = total * math.exp(log_front)
        return lower, 1.0 - lower, density
    b = x + 1.0 - a
    c, d = 1.0 / _TINY, 1.0 / b
    fraction = d
    for i in range(1, _MAX_TERMS):
        step = -i * (i - a)
        b += 2.0
        d = step * d + b
        d = _TINY if abs(d) < _TINY else d
        c = b + step / c
        c = _TINY if abs(c) < _TINY else c
        d = 1.0 / d
        delta = d * c
        fraction *= delta
        if abs(delta - 1.0) < _EPS:
            break
    upper = fraction * math.exp(log_front)
    return 1.0 - upper, upper, density


def gammainc_pq(a: float, x: float) -> tuple[float, float, float]:
    """``(P(a, x), Q(a, x), dP/dx)`` for ``a > 0``, ``x > 0``."""
    if a >= TEMME_MIN_A:
        found = _temme(a, x)
        if found is not None:
            return found
    return _classic(a, x)


def _normal_quantile(q: float) -> float:
    """A rough standard normal quantile (Abramowitz & Stegun 26.2.23, |error| < 4.5e-4): only
    the starting point of the iteration."""
    p = min(q, 1.0 - q)
    t = math.sqrt(-2.0 * math.log(p))
    z = t - (2.515517 + 0.802853 * t + 0.010328 * t * t) / (
        1.0 + 1.432788 * t + 0.189269 * t * t + 0.001308 * t * t * t
    )
    return z if q > 0.5 else -z


def _start(a: float, q: float) -> float:
    """Wilson-Hilferty's guess, or for small shapes the small-``x`` form ``P ~ x^a/Gamma(a+1)``."""
    if a > 1.0:
        cube = 1.0 - 1.0 / (9.0 * a) + _normal_quantile(q) / (3.0 * math.sqrt(a))
        if cube > 0.0:
            return a * cube**3
    small = math.exp((math.log(q) + math.lgamma(a + 1.0)) / a)
    return small if small < a + 1.0 else a + 1.0


def gammaincinv(a: float, q: float) -> float:
    """The ``x`` with ``P(a, x) = q`` (``a > 0``, ``0 < q < 1``); 0.0 where it underflows."""
    if not (a > 0.0 and 0.0 < q < 1.0):
        raise ValueError(f"gammaincinv needs a > 0 and 0 < q < 1, got a={a!r}, q={q!r}")
    x = _start(a, q)
    if x <= 0.0:
        return 0.0
    low, high = 0.0, math.inf
    for _ in range(100):
        lower, upper, density = gammainc_pq(a, x)
        # P - q, from whichever of P and Q is the smaller (the one known to full precision)
        error = lower - q if lower < 0.5 else (1.0 - q) - upper
        if error > 0.0:
            high = x
        else:
            low = x
        if error == 0.0 or density <= 0.0 or not math.isfinite(density):
            step = None
        else:
            step = error / density
            curvature = (a - 1.0) / x - 1.0
            step /= 1.0 - 0.5 * min(1.0, max(-1.0, step * curvature))
        following = x - step if step is not None else x
        if step is not None and abs(step) <= 4e-16 * x:
            return following
        if step is None or not (low < following < high):  # outside the bracket: bisect
            if error == 0.0:
                return x
            following = (low + high) / 2.0 if math.isfinite(high) else 2.0 * x
            if low > 0.0 and high / low > 4.0 and math.isfinite(high):
                following = math.sqrt(low * high)
        if abs(following - x) <= 4e-16 * following:
            return following
        x = following
    return x
