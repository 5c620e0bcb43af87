"""Pictures of a cell and of a search, the ones the papers print (matplotlib with Agg; PNG and SVG).

- cell: the derived cell as a graph with the op on each edge, and the ESS gates f′ and g′ below it;
- alpha_intra / alpha_inter / attention: every op's mixing weight on every edge over training;
- mad: mean absolute deviation of the intra- and inter-cell weights from uniform (ESS Fig. 6);
- valid_ppl: validation and training perplexity over training.
"""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: small, searchable, editable
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch  # noqa: E402
from matplotlib.path import Path as CurvePath  # noqa: E402

from common.errors import InputError  # noqa: E402
from common.files import atomic_write_bytes  # noqa: E402
from .genotype import ATTENTION_TYPES, GATES, Genotype, load, predecessors, validate  # noqa: E402
from common.runs import RunDir  # noqa: E402
from .ops import OPS, normalise  # noqa: E402

RADIUS = {"input": 0.38, "node": 0.28, "output": 0.38, "gate": 0.28}
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


@dataclass
class Graph:
    """A DAG to draw left to right: node columns, labels, kinds and labelled edges."""

    column: dict[str, int] = field(default_factory=dict)
    label: dict[str, str] = field(default_factory=dict)
    kind: dict[str, str] = field(default_factory=dict)
    edges: list[tuple[str, str, str]] = field(default_factory=list)

    def add(self, key: str, column: int, label: str, kind: str = "node") -> None:
        self.column[key], self.label[key], self.kind[key] = column, label, kind


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


def draw_graph(ax: plt.Axes, g: Graph, title: str) -> None:
    pos = {}
    for col, keys in _columns(g).items():
        for k, key in enumerate(keys):
            pos[key] = (1.6 * col, (len(keys) - 1) / 2 - k)
    for n, (src, dst, label) in enumerate(g.edges):
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        span = g.column[dst] - g.column[src]
        bend = 0.0 if span <= 1 or abs(y1 - y0) > 0.5 else 0.25 * (-1) ** n  # arc over skipped columns
        control = ((x0 + x1) / 2 - bend * (y1 - y0), (y0 + y1) / 2 + bend * (x1 - x0))
        start = _trim((x0, y0), control, RADIUS[g.kind[src]])
        end = _trim((x1, y1), control, RADIUS[g.kind[dst]])
        grey = label == ""
        ax.add_patch(FancyArrowPatch(path=CurvePath([start, control, end], [1, 3, 3]), arrowstyle="-|>",
                                     mutation_scale=9, lw=0.8 if grey else 1.2,
                                     color="#b0b0b0" if grey else OP_COLOURS.get(label, "#444444")))
        if label:
            mx, my = (start[0] + 2 * control[0] + end[0]) / 4, (start[1] + 2 * control[1] + end[1]) / 4
            ax.text(mx, my, label, fontsize=7, ha="center", va="center", color=OP_COLOURS.get(label, "#222222"),
                    bbox={"boxstyle": "round,pad=0.12", "fc": "white", "ec": "none", "alpha": 0.85})
    for key, (x, y) in pos.items():
        kind = g.kind[key]
        ax.add_patch(Circle((x, y), RADIUS[kind], fc=KIND_COLOURS[kind], ec="#555555", lw=0.8, zorder=3))
        ax.text(x, y, g.label[key], fontsize=8 if kind == "node" else 7, ha="center", va="center", zorder=4)
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(min(ys) - 0.9, max(ys) + 0.9)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(title, fontsize=9)


def _trim(point: tuple[float, float], toward: tuple[float, float], radius: float) -> tuple[float, float]:
    """Move an edge end from a node's centre to its rim, along the curve's tangent."""
    dx, dy = toward[0] - point[0], toward[1] - point[1]
    norm = math.hypot(dx, dy) or 1.0
    return point[0] + radius * dx / norm, point[1] + radius * dy / norm


def plot_cell(geno: Genotype, stem: Path) -> list[Path]:
    """The cell (and its gates and attention type) as PNG and SVG at stem.png / stem.svg."""
    cell = cell_graph(geno)
    width = 1.1 * (max(cell.column.values()) + 1) + 1
    title = geno.name or "cell"
    if geno.attention is not None:
        title += f"  (attention after the layer: {geno.attention})"
    if geno.inter is None:
        fig, ax = plt.subplots(figsize=(width, 1.0 + 0.75 * max(len(v) for v in _columns(cell).values())))
        draw_graph(ax, cell, "intra cell π")
    else:
        gates = [gate_graph(geno.inter, k) for k in GATES]
        fig = plt.figure(figsize=(max(width, 8.0), 7.0))
        grid = fig.add_gridspec(2, 2, height_ratios=[1.3, 1.0])
        draw_graph(fig.add_subplot(grid[0, :]), cell, r"intra cell π($\hat{h}_{t-1}$, $\hat{x}_t$)")
        m = geno.inter["history"]
        draw_graph(fig.add_subplot(grid[1, 0]), gates[0], f"f′: gate on $h_{{t-1}}$ from $x_{{t-{m}..t-1}}$")
        draw_graph(fig.add_subplot(grid[1, 1]), gates[1], f"g′: gate on $x_t$ from $h_{{t-{m}..t-1}}$")
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, stem)


def _columns(g: Graph) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for key, col in g.column.items():
        out.setdefault(col, []).append(key)
    return out


def _edge_panels(fig_title: str, panels: list[tuple[str, list[list[float]]]], steps: list[float], xlabel: str) -> plt.Figure:
    """One small panel per edge: the weight of each op (columns of OPS) over training."""
    ncols = min(6, len(panels))
    nrows = math.ceil(len(panels) / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(2.3 * ncols, 1.7 * nrows + 0.6), sharex=True, sharey=True,
                             squeeze=False)
    for ax, (title, series) in zip(axes.flat, panels):
        for o, op in enumerate(OPS):
            ax.plot(steps, [row[o] for row in series], color=OP_COLOURS[op], lw=1.2, label=op)
        ax.set_title(title, fontsize=8)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel(xlabel, fontsize=7)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", ncol=len(OPS), fontsize=7, frameon=False)
    fig.suptitle(fig_title, fontsize=10, x=0.01, ha="left")
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    return fig


def _weights_over_time(alphas: list, layout, method: str) -> list[torch.Tensor]:
    return [normalise(torch.tensor(a), layout, method) for a in alphas]


def _panels(weights: list[torch.Tensor], labels: list[str]) -> list[tuple[str, list[list[float]]]]:
    return [(label, [w[r].tolist() for w in weights]) for r, label in enumerate(labels)]


def search_genotype(run: RunDir, log: list[dict]) -> Genotype:
    """The run's written genotype, or the one derived at its last logged epoch."""
    if (run.path / "genotype.json").is_file():
        return load(run.path / "genotype.json")
    last = log[-1]
    data = {"version": 1, "name": f"{run.path.name} (epoch {last['epoch']})", "nodes": last["genotype"],
            "concat": list(range(1, len(last["genotype"]) + 1)), "inter": last.get("inter"),
            "attention": last.get("attention")}
    return validate(data, str(run.path / "log.jsonl"))


def _read_run(run_dir: str | Path) -> tuple[RunDir, dict, list[dict]]:
    run = RunDir(run_dir)
    config = run.config()
    log = run.read_log()
    if not log:
        raise InputError(f"{run.path}: no epochs logged yet (log.jsonl is empty)")
    return run, config, log


def _steps(log: list[dict]) -> list[int]:
    """x axis: training steps (batches) where logged, else epochs."""
    return [r["step"] for r in log] if all("step" in r for r in log) else [r["epoch"] for r in log]


def plot_search(run_dir: str | Path, out_dir: str | Path | None = None,
                compare: list[str | Path] = ()) -> list[Path]:
    """Every picture of a search run directory; returns the files written.

    Runs in `compare` add their curves to the MAD and perplexity pictures (e.g. joint against
    intra-only search, as in ESS Fig. 6).
    """
    run, config, log = _read_run(run_dir)
    others = [_read_run(other) for other in compare]
    out = Path(out_dir) if out_dir is not None else run.path / "plots"
    steps = _steps(log)
    xlabel = "training steps (batches)" if all("step" in r for r in log) else "epoch"
    method = "darts" if config.get("method") == "ess" else config.get("method", "darts")
    written = plot_cell(search_genotype(run, log), out / "cell")
    if all("alpha" in r for r in log):
        nodes = config["nodes"]
        labels = [f"{j}→{i}" for i in range(1, nodes + 1) for j in range(i)]
        weights = _weights_over_time([r["alpha"] for r in log], nodes, method)
        written += save_figure(_edge_panels(f"intra-cell mixing weights ({method})", _panels(weights, labels),
                                            steps, xlabel), out / "alpha_intra")
    if all("alpha_inter" in r for r in log):
        m, n = config["history"], config["inter_nodes"]
        layout = [len(predecessors(m, i)) for i in range(1, n + 1)]
        panels = []
        for gate, src in (("f", "x"), ("g", "h")):
            labels = [f"{gate}′ {src}(t-{i})→{i}" if p == 0 else f"{gate}′ {p}→{i}"
                      for i in range(1, n + 1) for p in predecessors(m, i)]
            panels += _panels(_weights_over_time([r["alpha_inter"][gate] for r in log], layout, "darts"), labels)
        written += save_figure(_edge_panels("inter-cell mixing weights", panels, steps, xlabel), out / "alpha_inter")
    if all("alpha_attention" in r for r in log):
        fig, ax = plt.subplots(figsize=(4.5, 3))
        weights = torch.softmax(torch.tensor([r["alpha_attention"] for r in log]), -1)
        for k, kind in enumerate(ATTENTION_TYPES):
            ax.plot(steps, weights[:, k].tolist(), marker="o", ms=3, label=kind)
        ax.set(xlabel=xlabel, ylabel="mixing weight", title="attention type (NASABN)")
        ax.legend(fontsize=8)
        written += save_figure(fig, out / "attention")
    runs = [(run, log)] + [(other, other_log) for other, _, other_log in others]
    named = [(f"{r.path.name}: " if others else "", r, rlog) for r, rlog in runs]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, _, rlog in named:
        for key, label in (("mad", "intra-cell"), ("mad_inter", "inter-cell")):
            points = [(s, r[key]) for s, r in zip(_steps(rlog), rlog) if r.get(key) is not None]
            if points:
                ax.plot(*zip(*points), marker="o", ms=3, label=name + label)
    ax.set(xlabel=xlabel, ylabel="MAD from uniform", title="edge weights vs uniform (ESS Fig. 6)")
    ax.legend(fontsize=8)
    written += save_figure(fig, out / "mad")
    fig, ax = plt.subplots(figsize=(5, 3.2))
    for name, _, rlog in named:
        line, = ax.plot(_steps(rlog), [r["valid_ppl"] for r in rlog], marker="o", ms=3, label=name + "validation")
        ax.plot(_steps(rlog), [r["train_ppl"] for r in rlog], ls="--", color=line.get_color(),
                label=name + "training (dropout on)")
    ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel="perplexity", title="search perplexity")
    ax.legend(fontsize=8)
    written += save_figure(fig, out / "valid_ppl")
    return written
