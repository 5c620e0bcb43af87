"""Pictures of a cell and of a search, the ones the papers print (matplotlib with Agg; PNG and SVG).

- cell: the derived cell as a graph with the op on each edge, and the ESS gates f′ and g′ below it;
- alpha_intra / alpha_inter / attention: every op's mixing weight on every edge over training;
- mad: mean absolute deviation of the intra- and inter-cell weights from uniform (ESS Fig. 6);
- eigenvalue: the dominant eigenvalue of the Hessian of the validation loss in α (`nas.runs.health`);
- op_share: each op's share of α's mixing mass and of the derived cell over training;
- valid_ppl: validation and training perplexity over training;
- curves: the training and validation curves of any run (search, train-lm, tagger; `nas.pictures.curves`).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: small, searchable, editable
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch  # noqa: E402
from matplotlib.textpath import TextPath  # noqa: E402
from matplotlib.ticker import LogFormatter, MaxNLocator  # noqa: E402

from nas.cells.genotype import ATTENTION_TYPES, GATES, Genotype, load, predecessors, validate  # noqa: E402
from nas.cells.ops import OPS  # noqa: E402
from nas.pictures.curves import Curves, Series, run_kind  # noqa: E402
from nas.common.errors import InputError  # noqa: E402
from nas.common.files import atomic_write_bytes  # noqa: E402
from nas.common.runs import RunDir  # noqa: E402
from nas.methods import method_class  # noqa: E402
from nas.cells.mixing import MixingRule  # noqa: E402
from nas.pictures.layout import INCH, LABEL_FONT, LABEL_PAD, RADIUS, Graph, Layout, layered_layout  # noqa: E402

TITLE_FONT, SUPTITLE_FONT = 9, 10
OP_COLOURS = {"none": "#9e9e9e", "identity": "#1f77b4", "tanh": "#2ca02c", "relu": "#d62728", "sigmoid": "#9467bd"}
KIND_COLOURS = {"input": "#fde0c5", "node": "#d9e8f5", "output": "#d5f0d5", "gate": "#f3d9f0"}
SQUASH_LABELS = {"sigmoid": "σ", "2sigmoid": "2σ", "none": "·"}


def save_figure(fig: plt.Figure, stem: Path) -> list[Path]:
    """Write stem.png and stem.svg atomically; returns their paths."""
    paths = []
    for ext in ("png", "svg"):
        buffer = io.BytesIO()
        fig.savefig(buffer, format=ext, dpi=150, bbox_inches="tight")
        path = Path(f"{stem}.{ext}")
        atomic_write_bytes(path, buffer.getvalue())
        paths.append(path)
    plt.close(fig)
    return paths


def _depths(nodes: list, first: int) -> dict[int, int]:
    """Column of each node: one past its deepest predecessor; predecessor 0 sits in column `first`."""
    depth = {0: first}
    for i, node in enumerate(nodes, start=1):
        depth[i] = 1 + max(depth[pred] for _, pred in node)
    return depth


def cell_graph(geno: Genotype) -> Graph:
    """The intra cell: x_t and h_{t-1} (gated when the genotype has inter gates) → s0 → nodes → h_t (mean)."""
    g = Graph()
    gated = geno.inter is not None
    g.add("x", 0, r"$\hat{x}_t$" if gated else r"$x_t$", "input")
    g.add("h", 0, r"$\hat{h}_{t-1}$" if gated else r"$h_{t-1}$", "input")
    depth = _depths([list(n) for n in geno.nodes], 1)
    g.add("0", 1, "0")
    g.edges += [("x", "0", ""), ("h", "0", "")]
    for i, node in enumerate(geno.nodes, start=1):
        g.add(str(i), depth[i], str(i))
        g.edges += [(str(pred), str(i), op) for op, pred in node]
    g.add("out", max(depth.values()) + 1, r"$h_t$", "output")
    g.edges += [(str(k), "out", "") for k in geno.concat]
    return g


def gate_graph(inter: dict, gate: str) -> Graph:
    """One ESS gate: history vectors → nodes → squash(mean) → the gated vector."""
    src, gated = ("x", "h_{t-1}") if gate == "f" else ("h", "x_t")
    nodes = inter[gate]
    g = Graph()
    for i in range(1, inter["history"] + 1):
        g.add(f"e{i}", 0, f"${src}_{{t-{i}}}$", "input")
    depth = _depths(nodes, 0)
    for i, node in enumerate(nodes, start=1):
        g.add(str(i), depth[i], str(i))
        g.edges += [(f"e{i}" if pred == 0 else str(pred), str(i), op) for op, pred in node]
    last = max(depth.values())
    g.add("gate", last + 1, SQUASH_LABELS[inter["squash"]], "gate")
    g.edges += [(str(i), "gate", "") for i in range(1, len(nodes) + 1)]
    hat = r"\hat{h}_{t-1}" if gate == "f" else r"\hat{x}_t"
    g.add("out", last + 2, f"${hat}$", "output")
    g.edges.append(("gate", "out", f"$\\odot {gated}$"))
    return g


def draw_graph(ax: plt.Axes, g: Graph, where: Layout, title: str) -> None:
    """`g` on `ax` as `where` places it; the axes' box must be `where.width` × `where.height` × INCH
    inches, so that text in points fits the layout."""
    for path, (_, _, label), centre in zip(where.paths, g.edges, where.labels):
        grey = label == ""
        ax.add_patch(
            FancyArrowPatch(
                path=path,
                arrowstyle="-|>",
                mutation_scale=9,
                lw=0.8 if grey else 1.2,
                color="#b0b0b0" if grey else OP_COLOURS.get(label, "#444444"),
            )
        )
        if centre is not None:
            ax.text(
                *centre,
                label,
                fontsize=LABEL_FONT,
                ha="center",
                va="center",
                color=OP_COLOURS.get(label, "#222222"),
                bbox={"boxstyle": f"round,pad={LABEL_PAD}", "fc": "white", "ec": "none", "alpha": 0.85},
            )
    for key, (x, y) in where.pos.items():
        kind = g.kind[key]
        ax.add_patch(Circle((x, y), RADIUS[kind], fc=KIND_COLOURS[kind], ec="#555555", lw=0.8, zorder=3))
        ax.text(x, y, g.label[key], fontsize=8 if kind == "node" else 7, ha="center", va="center", zorder=4)
    x0, y0, x1, y1 = where.box
    ax.set_xlim(x0, x1)
    ax.set_ylim(y0, y1)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=TITLE_FONT)


def cell_figure(geno: Genotype) -> plt.Figure:
    """The cell above its gates f′ and g′ (when it has them), each panel at INCH inches per unit."""
    title = geno.name or "cell"
    if geno.attention is not None:
        title += f"  (attention after the layer: {geno.attention})"
    cell = cell_graph(geno)
    if geno.inter is None:
        return _panels_figure([[(cell, "intra cell π")]], title)
    m = geno.inter["history"]
    f, g = (gate_graph(geno.inter, k) for k in GATES)
    return _panels_figure(
        [
            [(cell, r"intra cell π($\hat{h}_{t-1}$, $\hat{x}_t$)")],
            [
                (f, f"f′: gate on $h_{{t-1}}$ from $x_{{t-{m}..t-1}}$"),
                (g, f"g′: gate on $x_t$ from $h_{{t-{m}..t-1}}$"),
            ],
        ],
        title,
    )


def plot_cell(geno: Genotype, stem: Path) -> list[Path]:
    """The cell (and its gates and attention type) as PNG and SVG at stem.png / stem.svg."""
    return save_figure(cell_figure(geno), stem)


def _panels_figure(rows: list[list[tuple[Graph, str]]], title: str) -> plt.Figure:
    """Rows of graph panels, each centred in a slot as wide as the panel or its title, whichever is
    wider, under room for the title; sizes in inches, so no title or label meets another."""
    margin, title_room, top_room, between = 0.15, 0.4, 0.45, 0.4
    placed = [[(g, layered_layout(g), text) for g, text in row] for row in rows]
    slots = [[max(where.width * INCH, _text_inches(text, TITLE_FONT)) for _, where, text in row] for row in placed]
    heights = [max(where.height * INCH for _, where, _ in row) + title_room for row in placed]
    width = max([sum(row) + between * (len(row) - 1) for row in slots] + [_text_inches(title, SUPTITLE_FONT)])
    width, height = width + 2 * margin, top_room + sum(heights) + margin
    fig = plt.figure(figsize=(width, height))
    top = height - top_room
    for row, row_slots, row_height in zip(placed, slots, heights):
        left = (width - sum(row_slots) - between * (len(row) - 1)) / 2
        for (g, where, text), slot in zip(row, row_slots):
            w, h = where.width * INCH, where.height * INCH
            ax = fig.add_axes(((left + (slot - w) / 2) / width, (top - title_room - h) / height, w / width, h / height))
            draw_graph(ax, g, where, text)
            left += slot + between
        top -= row_height
    fig.suptitle(title, fontsize=SUPTITLE_FONT, y=1 - 0.1 / height, va="top")
    return fig


def _text_inches(text: str, size: float) -> float:
    return TextPath((0, 0), text, size=size).get_extents().width / 72


def _edge_panels(
    fig_title: str, panels: list[tuple[str, list[list[float]]]], steps: list[float], xlabel: str
) -> plt.Figure:
    """One small panel per edge: the weight of each op (columns of OPS) over training."""
    ncols = min(6, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(2.3 * ncols, 1.7 * nrows + 0.6), sharex=True, sharey=True, squeeze=False
    )
    for ax, (title, series) in zip(axes.flat, panels):
        for o, op in enumerate(OPS):
            ax.plot(steps, [row[o] for row in series], color=OP_COLOURS[op], lw=1.2, label=op)
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel(xlabel, fontsize=7)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=len(OPS), fontsize=7, frameon=False)
    fig.suptitle(fig_title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def _weights_over_time(alphas: list, layout, rule: MixingRule) -> list[torch.Tensor]:
    return [rule.normalise(torch.tensor(a), layout) for a in alphas]


def _panels(weights: list[torch.Tensor], labels: list[str]) -> list[tuple[str, list[list[float]]]]:
    return [(label, [w[r].tolist() for w in weights]) for r, label in enumerate(labels)]


def search_genotype(run: RunDir, log: list[dict]) -> Genotype:
    """The run's written genotype, or the one derived at its last logged epoch."""
    if (run.path / "genotype.json").is_file():
        return load(run.path / "genotype.json")
    last = log[-1]
    if not isinstance(last.get("genotype"), list):
        raise InputError(
            f"{run.path / 'log.jsonl'}: its last record has no 'genotype' (the cell derived at that "
            "epoch), and there is no genotype.json: not a search's log, or edited?"
        )
    data = {
        "version": 1,
        "name": f"{run.path.name} (epoch {last['epoch']})",
        "nodes": last["genotype"],
        "concat": list(range(1, len(last["genotype"]) + 1)),
        "inter": last.get("inter"),
        "attention": last.get("attention"),
    }
    return validate(data, str(run.path / "log.jsonl"))


def _read_run(run_dir: str | Path) -> tuple[RunDir, dict, list[dict]]:
    run = RunDir(run_dir)
    config = run.config()
    kind = run_kind(config, run.path)
    if kind != "search":
        raise InputError(f"{run.path}: a {kind} run, not a search; draw its curves with bin/plot-run {run.path}")
    log = run.read_log()
    if not log:
        raise InputError(f"{run.path}: no epochs logged yet (log.jsonl is empty)")
    return run, config, log


def _steps(log: list[dict]) -> list[int]:
    """x axis: training steps (batches) where logged, else epochs."""
    return [r["step"] for r in log] if all("step" in r for r in log) else [r["epoch"] for r in log]


def plot_search(run_dir: str | Path, out_dir: str | Path | None = None, compare: list[str | Path] = ()) -> list[Path]:
    """Every picture of a search run directory; returns the files written.

    Runs in `compare` add their curves to the MAD and perplexity pictures (e.g. joint against
    intra-only search, as in ESS Fig. 6).
    """
    run, config, log = _read_run(run_dir)
    others = [_read_run(other) for other in compare]
    out = Path(out_dir) if out_dir is not None else run.path / "plots"
    steps = _steps(log)
    xlabel = "training steps (batches)" if all("step" in r for r in log) else "epoch"
    method = config.get("method", "darts")
    written = plot_cell(search_genotype(run, log), out / "cell")
    written += _alpha_pictures(config, log, method, steps, xlabel, out)
    runs = [(run, log)] + [(other, other_log) for other, _, other_log in others]
    named = [(f"{r.path.name}: " if others else "", r, rlog) for r, rlog in runs]
    written += _health_pictures(named, log, steps, xlabel, out)
    fig, ax = plt.subplots(figsize=(5, 3.2))
    draw_curves(
        ax,
        [
            Series("perplexity", split, _steps(rlog), [r[key] for r in rlog], r.path.name if others else "")
            for _, r, rlog in named
            for key, split in (("valid_ppl", "validation"), ("train_ppl", "training (dropout on)"))
        ],
    )
    _log_axis(ax)
    ax.set(xlabel=xlabel, ylabel="perplexity", title="search perplexity")
    ax.legend(fontsize=8)
    written += save_figure(fig, out / "valid_ppl")
    return written


def _alpha_pictures(config: dict, log: list[dict], method: str, steps: list, xlabel: str, out: Path) -> list[Path]:
    """The mixing weights over the search: intra-cell, inter-cell (ESS), attention type (NASABN), as logged."""
    written: list[Path] = []
    if all("alpha" in r for r in log):
        nodes = config["nodes"]
        labels = [f"{j}→{i}" for i in range(1, nodes + 1) for j in range(i)]
        weights = _weights_over_time([r["alpha"] for r in log], nodes, method_class(method).rule)
        written += save_figure(
            _edge_panels(f"intra-cell mixing weights ({method})", _panels(weights, labels), steps, xlabel),
            out / "alpha_intra",
        )
    if all("alpha_inter" in r for r in log):
        m, n = config["history"], config["inter_nodes"]
        layout = [len(predecessors(m, i)) for i in range(1, n + 1)]
        panels = []
        for gate, src in (("f", "x"), ("g", "h")):
            labels = [
                f"{gate}′ {src}(t-{i})→{i}" if p == 0 else f"{gate}′ {p}→{i}"
                for i in range(1, n + 1)
                for p in predecessors(m, i)
            ]
            panels += _panels(
                _weights_over_time([r["alpha_inter"][gate] for r in log], layout, method_class(method).rule), labels
            )
        written += save_figure(_edge_panels("inter-cell mixing weights", panels, steps, xlabel), out / "alpha_inter")
    if all("alpha_attention" in r for r in log):
        fig, ax = plt.subplots(figsize=(4.5, 3))
        weights = torch.softmax(torch.tensor([r["alpha_attention"] for r in log]), -1)
        for k, kind in enumerate(ATTENTION_TYPES):
            ax.plot(steps, weights[:, k].tolist(), marker="o", ms=3, label=kind)
        ax.set(xlabel=xlabel, ylabel="mixing weight", title="attention type (NASABN)")
        ax.legend(fontsize=8)
        written += save_figure(fig, out / "attention")
    return written


def _health_pictures(named: list, log: list[dict], steps: list, xlabel: str, out: Path) -> list[Path]:
    """The search's health over the search: MAD from uniform, the dominant eigenvalue, the ops' shares."""
    written: list[Path] = []
    if any(key in r for _, _, rlog in named for r in rlog for key in ("mad", "mad_inter")):  # random, enas: no α
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for name, _, rlog in named:
            for key, label in (("mad", "intra-cell"), ("mad_inter", "inter-cell")):
                points = [(s, r[key]) for s, r in zip(_steps(rlog), rlog) if r.get(key) is not None]
                if points:
                    ax.plot(*zip(*points), marker="o", ms=3, label=name + label)
        ax.set(xlabel=xlabel, ylabel="MAD from uniform", title="edge weights vs uniform (ESS Fig. 6)")
        ax.legend(fontsize=8)
        written += save_figure(fig, out / "mad")
    if any("eigenvalue" in r for _, _, rlog in named for r in rlog):
        fig, ax = plt.subplots(figsize=(5, 3.2))
        for name, r, rlog in named:
            points = [
                (s, rec["eigenvalue"])
                for s, rec in zip(_steps(rlog), rlog)
                if "eigenvalue" in rec and math.isfinite(rec["eigenvalue"])
            ]
            if points:
                ax.plot(*zip(*points), marker="o", ms=3, label=name.rstrip(": ") or "λmax")
        ax.set(
            xlabel=xlabel, ylabel="dominant eigenvalue", title="Hessian of the validation loss in α (Zela et al. 2020)"
        )
        ax.legend(fontsize=8)
        written += save_figure(fig, out / "eigenvalue")
    if all("alpha_share" in r and "cell_share" in r for r in log):  # a search with α (random, enas: none)
        panels = [("alpha_share", "share of α's mixing mass"), ("cell_share", "share of the derived cell's edges")]
        fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.2), squeeze=False)
        for ax, (key, title) in zip(axes[0], panels):
            for op in OPS:
                if op in log[-1][key]:
                    ax.plot(steps, [r[key][op] for r in log], marker="o", ms=3, color=OP_COLOURS[op], label=op)
            ax.set(xlabel=xlabel, ylabel="share", title=title, ylim=(0, 1))
            ax.legend(fontsize=7)
        fig.tight_layout()
        written += save_figure(fig, out / "op_share")
    return written


LOG_SCALE = ("perplexity", "learning rate")  # metrics that fall by factors: a log axis once they span more than 3×


def _log_axis(ax: plt.Axes) -> None:
    """A log y axis with plain numbers (60, not 6×10¹), minor ticks labelled where a decade is short."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(LogFormatter(labelOnlyBase=False))
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def draw_curves(ax: plt.Axes, series: list[Series]) -> None:
    """Held-out curves solid with dots, training curves dashed, one colour per run; a curve of one
    epoch (a point, which a line alone does not show) is a dot too."""
    colours: dict[str, str] = {}
    for s in series:
        train = s.split.startswith("train")
        ax.plot(
            s.x,
            s.values,
            color=colours.setdefault(s.run, f"C{len(colours)}"),
            ls="--" if train else "-",
            marker="" if train and len(s.x) > 1 else "o",
            ms=3,
            label=s.name,
        )


def plot_curves(curves: Curves, out_dir: str | Path) -> list[Path]:
    """A panel per metric (perplexity; or loss, dev F1 and learning rate), as out_dir/curves.png and .svg."""
    metrics = curves.metrics()
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        series = [s for s in curves.series if s.metric == metric]
        draw_curves(ax, series)
        values = [v for s in series for v in s.values]
        if metric in LOG_SCALE and min(values) > 0 and max(values) > 3 * min(values):
            _log_axis(ax)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set(xlabel=curves.x_label, ylabel=metric, title=metric)
        ax.legend(fontsize=7)
    fig.suptitle(f"{curves.path.name} ({curves.kind} run)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, Path(out_dir) / "curves")
