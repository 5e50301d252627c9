"""``cosample experiment heatmap|appmon-gain|sensitivity|costcurves|scaling``: reproduce and show the results.

Parsing lives here with light imports; each handler imports what it needs, computes a tidy
table, writes it as CSV beside a PNG figure under ``--out`` (default ``out/``) and prints the
headline numbers.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from cosample.costmodel.paper import PAPER_ALPHA, PAPER_BETA
from cosample.experiments.bench_options import planner_benchmark_options

DEFAULT_OUT = Path("out")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "experiment",
        help="reproduce the paper's figures and benchmarks",
        description="Reproduce the paper's gain heatmap, cost curves and planner scaling.",
    )
    commands = parser.add_subparsers(dest="experiment", metavar="EXPERIMENT")
    commands.required = True

    heatmap = commands.add_parser("heatmap", help="gain of collaborative sampling (paper Fig. 3)")
    _heatmap_options(heatmap, grid="100")
    heatmap.add_argument("--servers", type=int, default=10, help="number of servers n (default 10)")
    heatmap.add_argument(
        "--cross-fraction",
        type=float,
        default=0.0,
        help="fraction of each server's traffic sent to the other servers "
        "(default 0: the paper's setup, traffic stays inside each server)",
    )
    heatmap.add_argument(
        "--name", default="heatmap", help="file stem of the outputs (default heatmap)"
    )
    heatmap.set_defaults(func=run_heatmap)

    appmon = commands.add_parser(
        "appmon-gain",
        help="requests monitored with and without collaboration (application monitoring, issue 27)",
    )
    appmon.add_argument("--servers", type=int, default=10, help="number of servers n (default 10)")
    appmon.add_argument(
        "--grid", default="20", help="N or PxL points evenly in (0, 1] for p and load (default 20)"
    )
    appmon.add_argument("--name", default="appmon_gain", help="file stem of the outputs")
    _output_options(appmon)
    appmon.set_defaults(func=run_appmon_gain)

    sensitivity = commands.add_parser(
        "sensitivity",
        help="the heatmap for other n, coefficients and crossing traffic, side by side",
    )
    _heatmap_options(sensitivity, grid="30", many_calibrations=True)
    sensitivity.add_argument(
        "--servers", type=int, default=10, help="n of the base case (default 10)"
    )
    sensitivity.add_argument(
        "--other-servers",
        type=_int_list,
        default=(3, 30, 100),
        help="other n, comma-separated (default 3,30,100)",
    )
    sensitivity.add_argument(
        "--cross-fractions",
        type=_float_list,
        default=(0.2, 0.5),
        help="crossing fractions, comma-separated (default 0.2,0.5)",
    )
    sensitivity.add_argument(
        "--name", default="sensitivity", help="file stem (default sensitivity)"
    )
    sensitivity.set_defaults(func=run_sensitivity)

    costcurves = commands.add_parser("costcurves", help="throughput vs rate per mechanism, fitted")
    source = costcurves.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--data", type=Path, help="tidy measurements CSV (mechanism, rate, throughput_pps)"
    )
    source.add_argument(
        "--synthetic",
        action="store_true",
        help="generate measurements from the paper's coefficients (with noise) instead",
    )
    costcurves.add_argument(
        "--protocol", default=None, help="use only measurements of this protocol (e.g. udp)"
    )
    costcurves.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        help="bootstrap resamples for the 95%% intervals (default 1000, as `cosample fit`)",
    )
    _output_options(costcurves)
    costcurves.add_argument("--name", default="costcurves", help="file stem (default costcurves)")
    costcurves.set_defaults(func=run_costcurves)

    scaling = commands.add_parser("scaling", help="planner time vs n per solver, log-log")
    scaling.add_argument(
        "--from-csv",
        type=Path,
        default=None,
        help="plot a table written by bench_planner instead of measuring again",
    )
    planner_benchmark_options(scaling)
    _output_options(scaling)
    scaling.add_argument(
        "--name", default="planner_scaling", help="file stem (default planner_scaling)"
    )
    scaling.set_defaults(func=run_scaling)

    collector = commands.add_parser(
        "collector", help="collector ingest rate beside pmacct's sfacctd, memory per server"
    )
    collector.add_argument("--quick", action="store_true", help="two low rates, 1 s each")
    collector.add_argument(
        "--seconds", type=float, default=8.0, help="seconds per rate (default 8)"
    )
    collector.add_argument("--csv", type=Path, default=None, help="write the tidy table here")
    collector.set_defaults(func=run_collector_bench)


def _heatmap_options(
    parser: argparse.ArgumentParser, grid: str, many_calibrations: bool = False
) -> None:
    parser.add_argument(
        "--alpha",
        type=float,
        default=None,
        help=f"cost of sampling a packet locally (default: paper's {PAPER_ALPHA}, or --calibration)",
    )
    parser.add_argument(
        "--beta",
        type=float,
        default=None,
        help=f"cost of mirroring a packet (default: paper's {PAPER_BETA}, or --calibration)",
    )
    if many_calibrations:
        parser.add_argument(
            "--calibration",
            type=Path,
            action="append",
            default=[],
            help="add a scenario with alpha and beta from this `cosample fit` JSON (repeatable)",
        )
    else:
        parser.add_argument(
            "--calibration",
            type=Path,
            default=None,
            help="take alpha and beta from this `cosample fit` JSON (flags still win)",
        )
    parser.add_argument(
        "--grid",
        default=grid,
        help=f"N or PxL points evenly in (0, 1] for p and load (default {grid})",
    )
    _output_options(parser)


def _output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help="directory for the CSV tables (default out/)"
    )
    parser.add_argument(
        "--figures",
        type=Path,
        default=None,
        help="directory for the PNG figure (default: same as --out)",
    )


def _figures(args: argparse.Namespace) -> Path:
    from cosample.experiments.files import output_dir

    return output_dir(args.figures if args.figures is not None else args.out)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated integers, got {text!r}"
        ) from None


def _float_list(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}"
        ) from None


def _coefficients(args: argparse.Namespace) -> tuple[float, float]:
    """Heatmap: alpha and beta from --calibration if given, else the paper's; flags win."""
    from cosample.experiments.files import read_calibration

    alpha, beta = PAPER_ALPHA, PAPER_BETA
    if args.calibration is not None:
        found = read_calibration(args.calibration)
        alpha, beta = found["alpha"], found["beta"]
    return (
        args.alpha if args.alpha is not None else alpha,
        args.beta if args.beta is not None else beta,
    )


def _base_and_calibrated(args: argparse.Namespace) -> tuple[float, float, list]:
    """Sensitivity: the base case uses --alpha/--beta (paper's by default); each --calibration
    adds a scenario named after its file."""
    from cosample.experiments.files import read_calibration

    alpha = args.alpha if args.alpha is not None else PAPER_ALPHA
    beta = args.beta if args.beta is not None else PAPER_BETA
    calibrated = []
    for path in args.calibration:
        found = read_calibration(path)
        calibrated.append((path.stem, found["alpha"], found["beta"]))
    return alpha, beta, calibrated


def run_heatmap(args: argparse.Namespace) -> int:
    from cosample.experiments import plots
    from cosample.experiments.files import output_dir, write_csv
    from cosample.experiments.heatmap import HeatmapSetup, gain_grid, parse_grid, summarise

    alpha, beta = _coefficients(args)
    setup = HeatmapSetup(
        servers=args.servers, alpha=alpha, beta=beta, cross_fraction=args.cross_fraction
    )
    p_values, load_values = parse_grid(args.grid)
    out = output_dir(args.out)
    frame = gain_grid(setup, p_values, load_values)
    csv = write_csv(frame, out / f"{args.name}.csv")
    title = f"n={setup.servers}, alpha={alpha:.3g}, beta={beta:.3g}"
    if setup.cross_fraction:
        title += f", {setup.cross_fraction:.0%} of traffic crosses servers"
    png = plots.gain_heatmap(frame, _figures(args) / f"{args.name}.png", title=title)
    print(f"{title}: {summarise(frame).report()}")
    print(f"wrote {csv} and {png}")
    return 0


def run_appmon_gain(args: argparse.Namespace) -> int:
    from cosample.experiments import plots
    from cosample.experiments.appmon_gain import gain_grid, report
    from cosample.experiments.files import output_dir, write_csv
    from cosample.experiments.heatmap import HeatmapSetup, parse_grid

    setup = HeatmapSetup(servers=args.servers)
    p_values, load_values = parse_grid(args.grid)
    frame = gain_grid(setup, p_values, load_values)
    csv = write_csv(frame, output_dir(args.out) / f"{args.name}.csv")
    title = (
        f"application monitoring, n={setup.servers}: requests monitored, collaborative / on-site"
    )
    png = plots.gain_heatmap(
        frame,
        _figures(args) / f"{args.name}.png",
        title=title,
        label="more requests monitored than on-site only (%)",
    )
    print(report(frame))
    print(f"wrote {csv} and {png}")
    return 0


def run_sensitivity(args: argparse.Namespace) -> int:
    from cosample.experiments import plots, sensitivity
    from cosample.experiments.files import output_dir, write_csv
    from cosample.experiments.heatmap import HeatmapSetup, parse_grid

    alpha, beta, calibrated = _base_and_calibrated(args)
    base = HeatmapSetup(servers=args.servers, alpha=alpha, beta=beta)
    chosen = sensitivity.scenarios(
        base,
        servers=args.other_servers,
        cross_fractions=args.cross_fractions,
        calibrated=calibrated,
    )
    p_values, load_values = parse_grid(args.grid)
    out = output_dir(args.out)
    frame = sensitivity.run(chosen, p_values, load_values)
    table = sensitivity.summary(frame)
    csv = write_csv(frame, out / f"{args.name}.csv")
    summary_csv = write_csv(table, out / f"{args.name}_summary.csv")
    png = plots.gain_panels(
        {title: cells for title, cells in frame.groupby("scenario", sort=False)},
        _figures(args) / f"{args.name}.png",
    )
    with_percent = table.assign(
        **{c: (table[c] * 100).round(1) for c in ("max_gain", "mean_gain", "median_gain")}
    )
    columns = ["scenario", "feasible_cells", "gain_cells", "max_gain", "mean_gain", "median_gain"]
    print(
        with_percent[columns]
        .rename(columns={"max_gain": "max %", "mean_gain": "mean %", "median_gain": "median %"})
        .to_string(index=False)
    )
    for path in args.calibration:
        print(f"calibrated coefficients from {path}")
    print(f"wrote {csv}, {summary_csv} and {png}")
    return 0


def run_costcurves(args: argparse.Namespace) -> int:
    from cosample.experiments import costcurves
    from cosample.experiments.files import output_dir, write_csv

    out = output_dir(args.out)
    measurements = (
        costcurves.synthetic_measurements()
        if args.synthetic
        else costcurves.read_measurements(args.data, protocol=args.protocol)
    )
    result = costcurves.fit_curves(measurements, n_bootstrap=args.bootstrap)
    curves_csv = write_csv(result.curves, out / f"{args.name}.csv")
    table_csv = write_csv(result.coefficients, out / f"{args.name}_coefficients.csv")
    title = (
        "synthetic measurements from the paper's coefficients"
        if args.synthetic
        else f"measured: {args.data}" + (f" ({args.protocol})" if args.protocol else "")
    )
    png = costcurves.figure(measurements, result, _figures(args) / f"{args.name}.png", title=title)
    print(costcurves.report(result.coefficients))
    print(f"wrote {curves_csv}, {table_csv} and {png}")
    return 0


def run_collector_bench(args: argparse.Namespace) -> int:
    from cosample.experiments import bench_collector

    argv = (
        ["--seconds", str(args.seconds)]
        + (["--quick"] if args.quick else [])
        + (["--csv", str(args.csv)] if args.csv else [])
    )
    return bench_collector.main(argv)


def run_scaling(args: argparse.Namespace) -> int:
    from cosample.experiments import bench_planner, plots
    from cosample.experiments.files import output_dir, read_csv

    out = output_dir(args.out)
    if args.from_csv is not None:
        table = read_csv(args.from_csv, required=bench_planner.COLUMNS)
        agree = bench_planner.report(table)
        if args.markdown:
            print(bench_planner.markdown(table))
    else:
        if args.csv is None:
            args.csv = out / f"{args.name}.csv"
        table, agree = bench_planner.benchmark(args)
    png = plots.planner_scaling(table, _figures(args) / f"{args.name}.png")
    print(f"wrote {png}")
    return 0 if agree else 1
