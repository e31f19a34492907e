"""How an ``Advice`` is shown: a table for people and a stable JSON document for programs.

The JSON schema is ``advisor-prediction/1`` (documented in ``docs/prediction-json.md``);
field names here are a contract: add fields, never rename or remove them within a version.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from advisor.core.advice import Advice, AdviceRequest
from advisor.core.compare import ModelCurve, errors
from advisor.core.correction import Fallback, plan_shortfall
from advisor.core.cost import shortfall
from advisor.core.profile import Profile
from advisor.core.units import format_bandwidth

SCHEMA = "advisor-prediction/1"
MIB = 1024 * 1024


def advice_to_json(profile: Profile | None, request: AdviceRequest, advice: Advice, *,
                   bandwidth_source: str = "given") -> dict[str, Any]:
    """The prediction as JSON data, schema ``advisor-prediction/1``; ``bandwidth_source`` says
    where the link rate came from: given (by the user), recorded (with the profile), measured
    (from the profile's transfer times, ``core/bandwidth.py``)."""
    net = request.network
    rec = advice.recommended
    c = request.constraints
    job = profile.job if profile is not None else None
    return {
        "schema": SCHEMA,
        "model": advice.model,
        "model_params": dict(advice.params),
        "model_details": dict(advice.details),
        "job": {
            "model": job.model if job else None,
            "source": job.source if job else None,
            "batch_size": advice.batch_size,
            "parameter_servers": advice.parameter_servers,
            "synchronous": job.synchronous if job else None,
        },
        "network": {
            "bandwidth_bps": net.bandwidth_bps if net else None,
            "bandwidth_source": bandwidth_source if net else None,
            # where the profile's own rate came from, when that is the rate used
            "recorded_bandwidth_source": job.recorded_bandwidth_source if net and job and bandwidth_source == "recorded"
            else None,
            "worker_bandwidth_bps": net.worker_bandwidth_bps if net else None,  # every worker's, when stated
            "win_bytes": net.win_bytes if net else None,
            "order": net.order.value if net else None,
            "contention": advice.details.get("contention"),
        },
        "settings": {
            "warmup_steps": request.curve.warmup_steps,
            "seed": request.curve.seed,
            "confidence": request.curve.confidence,
            "target_rel_halfwidth": request.curve.target_rel_halfwidth,
            "overhead_alpha_us_per_byte": request.overhead.alpha_us_per_byte,
            "overhead_beta_us": request.overhead.beta_us,
            "goodput": request.goodput,
            "client_gap": request.client_gap,
            "price_worker_per_hour": request.prices.worker_per_hour,
            "price_ps_per_hour": request.prices.ps_per_hour,
            "saturation_threshold": request.saturation_threshold,
        },
        "curve": [
            {
                "workers": p.workers,
                "throughput": p.throughput,
                "low": p.low,
                "high": p.high,
                "sim_low": p.low if p.sim_low is None else p.sim_low,
                "sim_high": p.high if p.sim_high is None else p.sim_high,
                "steps": p.steps,
                "events": p.events,
                "cost_per_example": p.cost_per_example,
                "expected_cost_per_example": p.expected_cost_per_example,
                "baselines": {"cynthia": p.cynthia, "phase_queueing": p.phase_queueing},
                "models": {name: {"throughput": value} for name, value in p.models.items()},
                "alternating": p.alternating,
                "outcome_low": min((o.low for o in p.outcomes), default=p.low),
                "outcome_high": max((o.high for o in p.outcomes), default=p.high),
                "outcomes": [{"name": o.name, "throughput": o.throughput, "low": o.low, "high": o.high,
                              "probability": o.probability, "probability_known": o.known, "basis": o.basis}
                             for o in p.outcomes],
                "p_deadline": p.p_deadline,
                "p_budget": p.p_budget,
                "p_meet": p.p_meet,
                "p_plan": p.p_plan,
            }
            for p in advice.points
        ],
        "constraints": {
            "examples": c.examples,
            "deadline_hours": c.deadline_hours,
            "budget": c.budget,
            "max_workers": c.max_workers,
            "confidence": c.confidence,
        },
        "saturation_workers": advice.saturation_workers,
        "recommended": {
            "workers": rec.workers,
            "throughput": rec.throughput,
            "cost_per_example": rec.cost_per_example,
            "hours": rec.hours,
            "total_cost": rec.total_cost,
            "expected_cost_per_example": rec.expected_cost_per_example,
            "hours_at_low": rec.hours_at_low,
            "p_deadline": rec.p_deadline,
            "p_budget": rec.p_budget,
            "p_meet": rec.p_meet,
            "needed_throughput": rec.needed_throughput,
            "confident": rec.confident,
            "warning": decision_warning(advice, request),
            "correction": _correction_json(advice),
        },
        "model_error": _model_error_json(advice),
        "profile_check": _profile_check_json(advice),
        "notes": list(advice.notes),
    }


def _correction_json(advice: Advice) -> dict[str, Any] | None:
    """The plan with one resize (``core/correction.py``): when it is observed, what it loses, and
    what to do after; None without ``--resize-after``."""
    plan = advice.plan
    if plan is None:
        return None
    return {"window_hours": plan.correction.window_hours, "restart_hours": plan.correction.restart_hours,
            "p_alone": plan.alone, "stay_at_least": plan.stay_at_least,
            "fallbacks": [{"at_least": f.at_least, "workers": f.workers, "in_time": f.in_time}
                          for f in plan.fallbacks]}


def _profile_check_json(advice: Advice) -> dict[str, Any] | None:
    """The model's W = 1 against the profile's own rate (``core/profile_check.py``), or None."""
    c = advice.profile_check
    if c is None:
        return None
    return {"profile_throughput": float(c.rate.throughput), "profile_steps": int(c.rate.steps),
            "untraced": bool(c.rate.untraced), "predicted": float(c.predicted), "gap": float(c.gap),
            "limit": float(c.limit), "contradicts": bool(c.contradicts)}


def decision_warning(advice: Advice, request: AdviceRequest) -> str | None:
    """The one line that says no W meets the deadline and budget with the confidence asked (None when one does)."""
    if advice.recommended.confident:
        return None
    if advice.plan is not None:
        return plan_shortfall(advice.plan, request.constraints, [p.workers for p in advice.points])
    point = advice.point(advice.recommended.workers)
    return shortfall(advice.recommended, request.constraints, [p.workers for p in advice.points],
                     [(o.name, o.throughput) for o in point.outcomes])


def _model_error_json(advice: Advice) -> dict[str, Any] | None:
    error = advice.model_error
    if error is None:
        return None
    return {"model": error.model, "scope": error.scope, "level": error.level, "source": error.source,
            "regimes": [{"workers_min": r.workers_min, "workers_max": r.workers_max, "down": r.down, "up": r.up,
                         "n": r.n, "exact": r.exact, "outcome": r.outcome} for r in error.regimes]}


def advice_table(profile: Profile | None, request: AdviceRequest, advice: Advice) -> str:
    """The prediction as an aligned text table with the decision underneath."""
    sat, rec = advice.saturation_workers, advice.recommended.workers
    c = request.constraints
    level = round(request.curve.confidence * 100)
    link = f"link {format_bandwidth(request.network.bandwidth_bps)} each way" if request.network else "no link rate"
    if request.network and request.network.worker_bandwidth_bps:
        link += f", worker links {format_bandwidth(request.network.worker_bandwidth_bps)}"
    name = (profile.job.model if profile else None) or "job"
    head = f"{name}: model {advice.model}, batch {advice.batch_size}, {advice.parameter_servers} PS, {link}"
    chance = c.binding
    planned = advice.plan is not None  # a column for the probability of a plan starting at each W
    rows = [
        head,
        "",
        f"{'W':>3}  {'examples/s':>10}  {f'{level}% interval':>19}  {'x W=1':>6}  {'cost/1M ex':>10}"
        + (f"  {'P(meet)':>7}" if chance else "") + (f"  {'P(plan)':>7}" if planned else "")
        + f"  {'Cynthia':>8}  {'phases':>8}",
    ]
    base = advice.points[0].throughput / advice.points[0].workers
    for p in advice.points:
        marks = (" <- saturation" if p.workers == sat else "") + (
            (" <- start" if planned else " <- recommended") if p.workers == rec else "")
        if len(p.outcomes) > 1:
            marks += f" ({p.outcomes[0].name}, probability {p.outcomes[0].probability:.0%})"
        rows.append(
            f"{p.workers:>3}  {p.throughput:>10.1f}  {p.low:>8.1f} - {p.high:>8.1f}  {p.throughput / base:>6.2f}"
            f"  {p.cost_per_example * 1e6:>10.4f}" + (f"  {_prob(p.p_meet)}" if chance else "")
            + (f"  {_prob(p.p_plan)}" if planned else "") + f"  {_num(p.cynthia)}  {_num(p.phase_queueing)}{marks}"
        )
        for o in p.outcomes[1:]:
            guess = "" if o.known else ", unknown"
            rows.append(f"{'or':>3}  {o.throughput:>10.1f}  {o.low:>8.1f} - {o.high:>8.1f}  {'':>6}  {'':>10}"
                        + (f"  {'':>7}" if chance else "") + (f"  {'':>7}" if planned else "")
                        + f"  {'':>8}  {'':>8}"
                        f" ({o.name}, probability {o.probability:.0%}{guess}: see note)")
    rows += ["", f"saturation point: W = {sat} (one more worker adds < {request.saturation_threshold:.0%} of W=1 "
                 "throughput)"]
    rows += _decision_rows(advice, request)
    if advice.model_error is not None:
        where = "" if advice.model_error.scope is None else f" (scope {advice.model_error.scope})"
        rows.append(f"intervals: simulation noise and the model's error measured on held-out jobs{where} "
                    f"({', '.join(f'{r.label} -{r.down:.0%}/+{r.up:.0%}' for r in advice.model_error.regimes)}); "
                    "--model-error off for the simulation's alone")
    placement = advice.details.get("ps_placement")
    if placement:
        per_ps: dict[int, list[str]] = {}
        for variable, ps in placement["variables"].items():
            per_ps.setdefault(ps, []).append(variable)
        rows.append(f"PS placement ({placement['strategy']}, {placement['parameter_servers']} PS):")
        moved = placement.get("bytes_per_ps") or []
        for ps in sorted(per_ps):
            shown = ", ".join(per_ps[ps][:4]) + (f" and {len(per_ps[ps]) - 4} more" if len(per_ps[ps]) > 4 else "")
            size = f", {moved[ps]:,d} B per step" if ps < len(moved) else ""
            rows.append(f"  ps{ps}: {len(per_ps[ps])} variable(s){size}: {shown}")
    buckets = advice.details.get("buckets")
    if buckets:
        rows.append(bucket_line(buckets))
    host = advice.details.get("host")
    if host:
        rows.append(host_line(host))
    rows += [f"note: {n}" for n in advice.notes]
    return "\n".join(rows)


def bucket_line(buckets: Mapping[str, Any]) -> str:
    """Which gradient buckets an all-reduce prediction replayed (``model_details.buckets``)."""
    sizes = [b / MIB for b in buckets["bytes"]]
    shown = ", ".join(f"{s:.2f}" for s in sizes[:8]) + (f" and {len(sizes) - 8} more" if len(sizes) > 8 else "")
    how = ("as the framework laid them out (recorded with the profile)" if buckets["source"] == "recorded"
           else f"grouped by the model at bucket_mb = {buckets['bucket_mb']:g} MiB")
    return f"buckets: {buckets['count']}, {how}; MiB in reduce order: {shown}"


def host_line(host: Mapping[str, Any]) -> str:
    """The host the workers of an all-reduce prediction share (``model_details.host``)."""
    per = "all on one host" if host["workers_per_host"] is None else f"{host['workers_per_host']} per host"
    per_mb = host.get("host_cpu_s_per_mb") or 0.0
    longer = f"{host['host_cpu_s'] * 1e3:g} ms" + (f" + {per_mb * 1e3:g} ms per MB all-reduced" if per_mb else "")
    text = f"host: workers share {host['cores']} core(s), {per}; each step {longer} longer per worker beyond them"
    transfer, per_call = host.get("transfer_cpu_s_per_mb") or 0.0, host.get("transfer_cpu_s_per_call") or 0.0
    own = host.get("cpu_s_per_step")
    if transfer or per_call or own:
        mine = "not measured" if own is None else f"{own * 1e3:g} ms"
        small = host.get("collective_cpu_s")
        each = "" if small is None else f", {small * 1e3:g} ms each other collective"
        text += (f", and no shorter than the CPU its workers need (a worker's own a step: {mine}; "
                 f"{per_call * 1e3:g} ms an all-reduce{each} and {transfer * 1e3:g} ms per MB) over "
                 f"{host.get('host_utilization') or 1.0:.0%} of the cores")
        k = host.get("host_bound_exponent")
        if k is not None:
            text += f", the two turning into each other as (step^{k:g} + bound^{k:g})^(1/{k:g}) beyond the cores"
    return text


def _decision_rows(advice: Advice, request: AdviceRequest) -> list[str]:
    """The recommendation under the table: the cheapest W that meets the deadline and budget with
    the confidence asked, or the likeliest to meet them when none does."""
    rec, c = advice.recommended, request.constraints
    what = " and ".join(part for part in (f"the {c.deadline_hours:g} h deadline" if c.deadline_hours else "",
                                          f"the budget of {c.budget:g}" if c.budget else "") if part)
    if advice.plan is not None:
        return _plan_rows(advice, request, what)
    if rec.confident:
        rows = [f"cost-optimal:     W = {rec.workers} at {rec.cost_per_example * 1e6:.4f} per million examples"
                + _expected(rec.expected_cost_per_example, rec.cost_per_example)]
    else:
        rows = [f"likeliest:        W = {rec.workers}: no worker count meets {what} with probability "
                f"{c.confidence:.0%} or more (see the warning)"]
    if rec.hours is not None:
        rows.append(f"                  finishes the job in {rec.hours:.2f} h at the predicted throughput")
    if rec.p_meet is not None:
        rows.append(f"                  meets {what} with probability {_prob(rec.p_meet).strip()} "
                    f"(confidence asked {c.confidence:.0%}; it needs {rec.needed_throughput:,.1f} examples/s)")
    return rows


def _plan_rows(advice: Advice, request: AdviceRequest, what: str) -> list[str]:
    """The start planned on one resize (``core/correction.py``) and what to do once it is observed."""
    plan, c = advice.plan, request.constraints
    assert plan is not None
    rec, k = plan.choice, plan.correction
    loss = f", losing {k.restart_hours:g} h to the resize" if k.restart_hours else ""
    head = (f"start:            W = {rec.workers}" if rec.confident else
            f"likeliest start:  W = {rec.workers}: no plan meets {what} with probability {c.confidence:.0%} or more")
    how = (f", observed after {k.window_hours:g} h and resized once if short{loss}" if plan.stay_at_least > 0 else
           f", planned without a resize (none after {k.window_hours:g} h{loss} could come in time, or this W "
           "alone is too unlikely to meet it to be worth a trial)")
    rows = [head + how,
            f"                  meets {what} with probability {_prob(rec.p_meet).strip()} this way "
            f"({_prob(plan.alone).strip()} without the resize; confidence asked {c.confidence:.0%}); expected "
            f"{(rec.expected_cost_per_example or 0) * 1e6:.4f} per million examples"]
    if plan.stay_at_least > 0 and all(f.workers == plan.workers for f in plan.fallbacks):
        rows.append("                  no worker count is faster to resize to: it stays either way")
    elif plan.stay_at_least > 0:
        def move(f: Fallback) -> str:
            to = "stay" if f.workers == plan.workers else f"W = {f.workers}"
            where = f" from {f.at_least:,.1f}" if f.at_least > 0 else " below that"
            late = "" if f.in_time else (" (nothing is faster; too late for the deadline)" if f.workers == plan.workers
                                         else " (the fastest; too late for the deadline)")
            return to + where + late
        rows.append(f"                  stays if it runs at {plan.stay_at_least:,.1f} examples/s or more; else "
                    + ", ".join(move(f) for f in plan.fallbacks))
    return rows


def _prob(p: float | None) -> str:
    """A probability in the table's P column."""
    if p is None:
        return f"{'-':>7}"
    text = "<0.1%" if 0 < p < 0.001 else (">99.9%" if 0.999 < p < 1 else f"{p:.1%}")
    return f"{text:>7}"


def _expected(expected: float | None, point: float) -> str:
    """The expected cost, where the interval makes it differ from the point's (what the choice compared)."""
    if expected is None or abs(expected - point) <= 5e-5 * point:
        return ""
    return f" (expected {expected * 1e6:.4f} over the interval)"


def _num(value: float | None) -> str:
    """A side-by-side model's value in its column; n/a where the model does not apply."""
    return f"{'n/a':>8}" if value is None else f"{value:>8.1f}"


COMPARE_SCHEMA = "advisor-compare/1"


def compare_to_json(profile: Profile | None, bandwidth_bps: float | None, bandwidth_source: str,
                    curves: Sequence[ModelCurve],
                    observed: Mapping[int, float]) -> dict[str, Any]:
    """``advisor compare --json``: each model's points (or why it has none), and its errors."""
    models = []
    for c in curves:
        e = errors(c, observed)
        models.append({
            "name": c.name,
            "description": c.description,
            "applies": c.why_not is None,
            "why_not": c.why_not,
            "params": dict(c.params),
            "params_given": {k: c.params.get(k) for k in c.given},
            "curve": [{"workers": p.workers, "throughput": p.throughput, "low": p.low, "high": p.high,
                       "error": e.per_worker.get(p.workers)} for p in c.points],
            "median_error": e.median,
            "max_error": e.max,
        })
    return {
        "schema": COMPARE_SCHEMA,
        "job": None if profile is None else {
            "model": profile.job.model, "source": profile.job.source, "batch_size": profile.job.batch_size,
            "parameter_servers": profile.job.parameter_servers, "synchronous": profile.job.synchronous},
        "network": {"bandwidth_bps": bandwidth_bps, "bandwidth_source": bandwidth_source},
        "observed": {str(w): v for w, v in observed.items()},
        "models": models,
    }


def compare_table(profile: Profile | None, bandwidth_bps: float | None, curves: Sequence[ModelCurve],
                  observed: Mapping[int, float], workers: Sequence[int]) -> str:
    """Examples/s per W (rows) and model (columns); with measurements, |error| beside each."""
    cells = [max(len(c.name), 15 if observed else 9) for c in curves]
    job = "spec only" if profile is None else \
        f"{profile.job.model or 'job'}: batch {profile.job.batch_size}, {profile.job.parameter_servers} PS"
    link = "no link rate" if bandwidth_bps is None else f"link {format_bandwidth(bandwidth_bps)} each way"
    head = f"{job}, {link}; examples/s" + (" (|error|)" if observed else "")
    rows = [head, "", f"{'W':>3}" + (f"  {'measured':>9}" if observed else "") +
            "".join(f"  {c.name:>{cell}}" for c, cell in zip(curves, cells))]
    for w in sorted(set(workers) | set(observed)):
        line = f"{w:>3}" + (f"  {observed[w]:>9.1f}" if w in observed else (f"  {'':>9}" if observed else ""))
        for c, cell in zip(curves, cells):
            thr = c.throughput(w)
            if thr is None:
                text = "n/a"
            elif w in observed:
                text = f"{thr:.1f} ({abs(thr / observed[w] - 1):>4.0%})"
            else:
                text = f"{thr:.1f}"
            line += f"  {text:>{cell}}"
        rows.append(line)
    if observed:
        summaries = [errors(c, observed) for c in curves]
        rows.append("")
        for label, pick in (("median", lambda e: e.median), ("max", lambda e: e.max)):
            line = f"{label:>14}" if label else ""
            line = f"{label + ' |error|':>14}"
            for e, cell in zip(summaries, cells):
                value = pick(e)
                line += f"  {'n/a' if value is None else f'{value:.1%}':>{cell}}"
            rows.append(line)
    for c in curves:
        if c.given:
            rows.append(f"{c.name} ran with " + ", ".join(f"{k}={c.params.get(k)}" for k in c.given))
    for c in curves:
        if c.why_not:
            rows.append(f"n/a {c.name}: {c.why_not}")
    return "\n".join(rows)
